//! Publishing fire messages to RabbitMQ with publisher confirms. A message
//! counts as sent only once the broker confirmed it; any failure drops the
//! connection so the next call reconnects (and re-declares the topology).

use anyhow::Context;
use domain::message::{BUNDLE_MAX, FireMessage, bundle};
use lapin::options::BasicPublishOptions;
use lapin::{Channel, Connection};

use crate::amqp::{self, Topology};
use crate::properties::{self, Headers};

pub struct Publisher {
    url: String,
    name: String,
    topology: Topology,
    link: Option<(Connection, Channel)>,
    bundle_max: usize,
}

impl Publisher {
    pub fn new(url: String, name: String, topology: Topology) -> Self {
        Self { url, name, topology, link: None, bundle_max: BUNDLE_MAX }
    }

    /// One fire per AMQP message: the broker's per-message ceiling
    /// (`cronshard-loadtest ceiling`) is measured with these.
    pub fn unbundled(self) -> Self {
        Self { bundle_max: 1, ..self }
    }

    async fn channel(&mut self) -> anyhow::Result<&Channel> {
        let healthy = self.link.as_ref().is_some_and(|(c, ch)| c.status().connected() && ch.status().connected());
        if !healthy {
            self.link = None;
            let connection = amqp::connect(&self.url, &self.name).await.context("connecting to RabbitMQ")?;
            let channel = amqp::confirm_channel(&connection).await?;
            self.topology.declare(&channel).await.context("declaring the queue topology")?;
            self.link = Some((connection, channel));
        }
        Ok(&self.link.as_ref().expect("link set above").1)
    }

    /// Messages ready in the queues workers take fire messages from
    /// (`Topology::ready_messages`): how far behind they are.
    pub async fn ready_messages(&mut self) -> anyhow::Result<u64> {
        self.channel().await?;
        let (connection, _) = self.link.as_ref().expect("link set by channel()");
        let ready = self.topology.ready_messages(connection).await;
        if ready.is_err() {
            self.link = None;
        }
        ready.context("counting the ready messages")
    }

    /// Publishes all messages to the main queue (as first attempts), in
    /// bundles of slots due close together (`domain::message::bundle`), and waits
    /// for every confirm. Streams the publishes and then awaits the
    /// confirms, so a batch costs one round trip, not one per message.
    pub async fn publish(&mut self, messages: &[FireMessage]) -> anyhow::Result<()> {
        let batch: Vec<(&FireMessage, u32)> = messages.iter().map(|m| (m, 1)).collect();
        self.publish_attempts(&batch).await
    }

    /// Publishes each message as the given attempt: a replayed or swept row
    /// goes on from the attempts it already has.
    pub async fn publish_attempts(&mut self, messages: &[(&FireMessage, u32)]) -> anyhow::Result<()> {
        let result = self.publish_inner(messages).await;
        if result.is_err() {
            self.link = None;
        }
        result
    }

    async fn publish_inner(&mut self, messages: &[(&FireMessage, u32)]) -> anyhow::Result<()> {
        let routing_key = self.topology.main_queue.clone();
        let groups = bundle(messages, self.bundle_max);
        let channel = self.channel().await?;
        let mut confirms = Vec::with_capacity(groups.len());
        for (group, attempt) in groups {
            let (payload, properties) = properties::encode(&group, &Headers::attempt(attempt))?;
            let confirm = channel
                .basic_publish(
                    "".into(),
                    routing_key.as_str().into(),
                    BasicPublishOptions { mandatory: true, ..Default::default() },
                    &payload,
                    properties,
                )
                .await?;
            confirms.push(confirm);
        }
        for confirm in futures::future::join_all(confirms).await {
            let confirmation = confirm?;
            if !confirmation.is_ack() {
                anyhow::bail!("broker refused a message (nack)");
            }
            if confirmation.take_message().is_some() {
                anyhow::bail!("broker returned a message as unroutable");
            }
        }
        Ok(())
    }
}
