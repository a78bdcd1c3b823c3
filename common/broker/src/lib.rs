//! cronshard's RabbitMQ side: the queue topology ([`amqp`]), the publisher
//! with confirms ([`publisher`]), the one encoder and decoder of a message's
//! AMQP properties and attempt header ([`properties`]), and the outbox that
//! publishes the ledger rows the store committed ([`outbox`]).

pub mod amqp;
pub mod outbox;
pub mod properties;
pub mod publisher;
