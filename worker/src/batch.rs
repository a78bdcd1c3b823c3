//! Coalesces concurrent single-item requests into multi-row statements.
//!
//! A burst of pre-armed messages all come due in the same millisecond; one
//! Postgres round trip each would cap delivery at a few thousand per second.
//! Callers submit one item and await its answer; a collector task takes
//! whatever is queued (up to `max_batch`) as soon as one of `concurrency`
//! slots is free, so a lone request goes out at once (no added latency)
//! while a burst turns into a few large statements. Where a little latency
//! costs nothing (outcome writes), a `linger` gathers a steady trickle of
//! requests into one statement too.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

type Reply<R> = oneshot::Sender<Result<R, Arc<anyhow::Error>>>;

pub struct Batcher<T, R> {
    tx: mpsc::UnboundedSender<(T, Reply<R>)>,
}

impl<T: Send + 'static, R: Send + 'static> Batcher<T, R> {
    /// `run` gets a batch and must answer one result per item, in order.
    /// A batch waits up to `linger` after its first item for more.
    pub fn spawn<F, Fut>(max_batch: usize, concurrency: usize, linger: std::time::Duration, run: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<Vec<R>>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<(T, Reply<R>)>();
        let slots = Arc::new(Semaphore::new(concurrency.max(1)));
        let run = Arc::new(run);
        tokio::spawn(async move {
            loop {
                // Take a slot before draining: while every slot is busy the
                // queue grows, and the next batch is larger.
                let Ok(slot) = slots.clone().acquire_owned().await else { return };
                let Some(first) = rx.recv().await else { return };
                let mut items = vec![first];
                let gather_until = tokio::time::Instant::now() + linger;
                while items.len() < max_batch {
                    match rx.try_recv() {
                        Ok(item) => items.push(item),
                        Err(_) if linger.is_zero() => break,
                        Err(_) => match tokio::time::timeout_at(gather_until, rx.recv()).await {
                            Ok(Some(item)) => items.push(item),
                            Ok(None) | Err(_) => break,
                        },
                    }
                }
                let run = run.clone();
                tokio::spawn(async move {
                    let (inputs, replies): (Vec<T>, Vec<Reply<R>>) = items.into_iter().unzip();
                    let expected = inputs.len();
                    metrics::histogram!(runtime::metrics::WORKER_BATCH_SIZE).record(expected as f64);
                    match run(inputs).await {
                        Ok(results) if results.len() == expected => {
                            for (reply, result) in replies.into_iter().zip(results) {
                                let _ = reply.send(Ok(result));
                            }
                        }
                        Ok(results) => {
                            let e = Arc::new(anyhow::anyhow!("batch answered {} of {expected} items", results.len()));
                            replies.into_iter().for_each(|r| drop(r.send(Err(e.clone()))));
                        }
                        Err(e) => {
                            let e = Arc::new(e);
                            replies.into_iter().for_each(|r| drop(r.send(Err(e.clone()))));
                        }
                    }
                    drop(slot);
                });
            }
        });
        Self { tx }
    }

    pub async fn call(&self, item: T) -> anyhow::Result<R> {
        self.submit(item).get().await
    }

    /// Queues the item for the next statement and returns what will carry
    /// its answer: a caller that must not stay a future per item (a
    /// delivered slot waiting for its outcome's write) keeps only this.
    pub fn submit(&self, item: T) -> Answer<R> {
        let (reply, answer) = oneshot::channel();
        Answer(self.tx.send((item, reply)).is_ok().then_some(answer))
    }
}

/// One submitted item's answer; `None` when the batcher had stopped.
pub struct Answer<R>(Option<oneshot::Receiver<Result<R, Arc<anyhow::Error>>>>);

impl<R> Answer<R> {
    /// Awaited once.
    pub async fn get(&mut self) -> anyhow::Result<R> {
        let Some(answer) = self.0.as_mut() else { anyhow::bail!("batcher stopped") };
        match answer.await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(anyhow::anyhow!("{e:#}")),
            Err(_) => Err(anyhow::anyhow!("batcher dropped the request")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_burst_becomes_few_batches_and_each_caller_gets_its_own_answer() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let batcher = Arc::new(Batcher::spawn(64, 2, Duration::ZERO, move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.len());
            async move {
                tokio::task::yield_now().await;
                Ok(items.into_iter().map(|i| i * 10).collect())
            }
        }));
        let calls: Vec<_> = (0..500u32)
            .map(|i| {
                let b = batcher.clone();
                tokio::spawn(async move { (i, b.call(i).await.unwrap()) })
            })
            .collect();
        for c in calls {
            let (i, r) = c.await.unwrap();
            assert_eq!(r, i * 10);
        }
        let sizes = sizes.lock().unwrap();
        assert_eq!(sizes.iter().sum::<usize>(), 500);
        assert!(sizes.iter().all(|&s| s <= 64), "a batch exceeded max_batch: {sizes:?}");
        assert!(sizes.len() < 100, "500 concurrent calls made {} batches", sizes.len());
    }

    #[tokio::test]
    async fn submitted_items_are_answered_each_in_order_from_shared_statements() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let batcher = Batcher::spawn(64, 1, Duration::ZERO, move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.len());
            async move { Ok(items.into_iter().map(|i| i + 1).collect()) }
        });
        let mut answers = (0..100).map(|i| batcher.submit(i)).collect::<Vec<_>>();
        let mut answered = Vec::new();
        for answer in &mut answers {
            answered.push(answer.get().await.unwrap());
        }
        assert_eq!(answered, (1..101).collect::<Vec<_>>());
        let sizes = sizes.lock().unwrap();
        assert!(sizes.len() <= 3, "100 items submitted together made {} statements: {sizes:?}", sizes.len());
    }

    #[tokio::test]
    async fn a_failed_batch_fails_every_caller_in_it() {
        let batcher = Batcher::spawn(8, 1, Duration::ZERO, |_: Vec<u32>| async {
            anyhow::bail!("database down") as anyhow::Result<Vec<u32>>
        });
        let err = batcher.call(1).await.unwrap_err();
        assert!(err.to_string().contains("database down"), "{err}");
    }

    #[tokio::test]
    async fn a_wrong_answer_count_is_an_error_not_a_mismatch() {
        let batcher = Batcher::spawn(8, 1, Duration::ZERO, |_: Vec<u32>| async { Ok(Vec::<u32>::new()) });
        assert!(batcher.call(1).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lingering_batch_gathers_a_trickle_and_goes_when_the_linger_ends() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let batcher = Arc::new(Batcher::spawn(64, 1, Duration::from_millis(20), move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.len());
            async move { Ok(items) }
        }));
        let started = tokio::time::Instant::now();
        let calls: Vec<_> = (0..3u32)
            .map(|i| {
                let b = batcher.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(5 * u64::from(i))).await;
                    b.call(i).await.unwrap()
                })
            })
            .collect();
        for (i, c) in calls.into_iter().enumerate() {
            assert_eq!(c.await.unwrap(), i as u32);
        }
        assert_eq!(*sizes.lock().unwrap(), vec![3], "requests 5 ms apart go in one batch");
        assert_eq!(started.elapsed(), Duration::from_millis(20), "the batch goes when the linger ends");
    }
}
