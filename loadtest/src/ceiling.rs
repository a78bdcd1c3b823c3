//! The broker ceiling: the physical limit fires/s is compared with. N real
//! fire messages (a serialized `FireMessage` of the same size as a herd
//! fire) are published with confirms by the scheduler's own publisher
//! (`broker::publisher`, streamed confirms in batches, one fire per AMQP
//! message: the schedulers' bundles carry up to 25) while a consumer on
//! the same broker takes them with manual acks, as a worker does. No
//! scheduler, no worker, no database: only RabbitMQ and this process.
//!
//! The queues belong to a throwaway cluster name and are deleted afterwards.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use broker::amqp::Topology;
use domain::message::{FIRE_MESSAGE_VERSION, FireMessage};
use domain::slot::Trigger;

use crate::report::{OutArgs, Report, fmt_f, fmt_int};

#[derive(clap::Args, Clone, Debug)]
pub struct CeilingArgs {
    /// Messages to publish and consume.
    #[arg(long, default_value_t = 100_000)]
    pub ceiling_messages: usize,
    /// Messages per publish batch (the confirms of a batch are awaited together).
    #[arg(long, default_value_t = 1000)]
    pub ceiling_batch: usize,
    /// Consumer prefetch (the worker's default is 2000).
    #[arg(long, default_value_t = 2000)]
    pub ceiling_prefetch: u16,
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp_url: String,
    /// The queues' type, as `AMQP_QUEUE_TYPE` sets it for the product.
    #[arg(long, value_enum, default_value = "classic")]
    pub ceiling_queue_type: broker::amqp::QueueType,
}

#[derive(clap::Args)]
pub struct CeilingCmd {
    #[command(flatten)]
    ceiling: CeilingArgs,
    #[command(flatten)]
    out: OutArgs,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ceiling {
    pub messages: usize,
    pub message_bytes: usize,
    /// Confirmed publishes per second (first publish → last confirm).
    pub publish_per_second: f64,
    /// Messages per second from the first publish to the last consumed: the ceiling.
    pub end_to_end_per_second: f64,
    pub seconds: f64,
}

/// A fire message as the scheduler publishes it for a herd job (HTTP
/// target on loopback with the API's defaults).
pub fn sample_message() -> anyhow::Result<FireMessage> {
    let spec = domain::job::JobSpec::from_json_with(
        &json!({
            "name": "ceiling",
            "schedule": { "kind": "once", "at": "2030-01-01T00:00:00.000Z" },
            "target": { "kind": "http", "url": "http://127.0.0.1:40000/hook", "timeout_ms": 10_000 },
        }),
        &domain::job::Limits::unrestricted(),
    )
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let at = domain::execution::truncate_ms(Utc::now());
    let job_id = Uuid::now_v7();
    Ok(FireMessage {
        v: FIRE_MESSAGE_VERSION,
        fire_id: Uuid::now_v7(),
        job_id,
        namespace: "default".to_owned(),
        scheduled_at: at,
        due_at: at,
        execution_id: domain::execution::execution_id(job_id, at),
        trigger: Trigger::Schedule,
        target: spec.target,
        retry: spec.retry,
        overlap: spec.overlap,
        retry_from: 0,
        // As a scheduled slot carries it: the same size as a herd's fire.
        misfire: Some(spec.misfire),
        starting_deadline_ms: spec.starting_deadline_ms,
        completion: None,
        after_completion: Default::default(),
    })
}

pub async fn measure(args: &CeilingArgs) -> anyhow::Result<Ceiling> {
    let cluster = crate::benchdb::cluster_name("ceiling");
    let topology = Topology::new(&cluster).with_queue_type(args.ceiling_queue_type);
    let template = sample_message()?;
    let message_bytes = serde_json::to_vec(&template)?.len();
    // Distinct ids, so each message is a distinct fire of the same size.
    let messages: Vec<FireMessage> = (0..args.ceiling_messages)
        .map(|_| {
            let job_id = Uuid::now_v7();
            FireMessage {
                fire_id: Uuid::now_v7(),
                job_id,
                namespace: "default".to_owned(),
                execution_id: domain::execution::execution_id(job_id, template.scheduled_at),
                ..template.clone()
            }
        })
        .collect();

    // The consumer first, so the queue exists and drains from the start.
    let connection = broker::amqp::connect(&args.amqp_url, "cronshard-loadtest ceiling consumer")
        .await
        .context("connecting to RabbitMQ")?;
    let channel = connection.create_channel().await?;
    topology.declare(&channel).await?;
    channel.basic_qos(args.ceiling_prefetch, BasicQosOptions::default()).await?;
    let mut consumer = channel
        .basic_consume(
            topology.main_queue.as_str().into(),
            "ceiling".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let total = args.ceiling_messages;
    let consume = tokio::spawn(async move {
        let mut n = 0usize;
        while n < total {
            let next = tokio::time::timeout(Duration::from_secs(60), consumer.next())
                .await
                .context("no message for 60 s")?
                .context("the consumer was cancelled")??;
            next.acker.ack(BasicAckOptions::default()).await?;
            n += 1;
        }
        anyhow::Ok(Instant::now())
    });

    let mut publisher = broker::publisher::Publisher::new(
        args.amqp_url.clone(),
        "cronshard-loadtest ceiling publisher".into(),
        topology.clone(),
    )
    .unbundled();
    let started = Instant::now();
    for chunk in messages.chunks(args.ceiling_batch.max(1)) {
        publisher.publish(chunk).await?;
    }
    let published = started.elapsed().as_secs_f64();
    let consumed_at = consume.await??;
    let seconds = consumed_at.duration_since(started).as_secs_f64();

    let _ = topology.delete(&channel).await;
    let _ = connection.close(200, "done".into()).await;
    Ok(Ceiling {
        messages: total,
        message_bytes,
        publish_per_second: (total as f64 / published).round(),
        end_to_end_per_second: (total as f64 / seconds).round(),
        seconds,
    })
}

pub async fn run(cmd: CeilingCmd) -> anyhow::Result<()> {
    let mut report = Report::new(
        "ceiling",
        "ceiling".into(),
        "Broker ceiling: fire messages published with confirms and consumed, no scheduler",
        &cmd.out,
    );
    let c = measure(&cmd.ceiling).await?;
    report.row("messages (bytes each)", format!("{} ({} B)", fmt_int(c.messages as i64), c.message_bytes));
    report.row(
        "publish batch / consumer prefetch",
        format!("{} / {}", cmd.ceiling.ceiling_batch, cmd.ceiling.ceiling_prefetch),
    );
    report.row("queue type", format!("{:?}", cmd.ceiling.ceiling_queue_type).to_lowercase());
    report.row("confirmed publishes/s", fmt_int(c.publish_per_second as i64));
    report.row("ceiling: published and consumed, msgs/s", fmt_int(c.end_to_end_per_second as i64));
    report.row("seconds", fmt_f(c.seconds));
    report.data("ceiling", &c);
    report.finish(&cmd.out)?;
    Ok(())
}
