//! Per job, the last late `fire_once` slot this worker let run and when
//! (or the run the ledger named when it skipped one), behind a lock that
//! makes the job's late slots decide one at a time: a backlog brings them
//! together, and each must see whether the one before was let run (its row
//! may not say so yet). What is kept is decided by
//! `lifecycle::late_run_after`.

use std::sync::Arc;

use crate::lifecycle::LateRun;

pub(crate) struct LateRuns {
    inner: std::sync::Mutex<LateRunsInner>,
}

struct LateRunsInner {
    jobs: std::collections::HashMap<uuid::Uuid, LastLateRun>,
    /// Size at which the map is next swept: doubled past what a sweep
    /// kept, so a map of recent entries is not swept on every call.
    sweep_at: usize,
}

pub(crate) type LastLateRun = Arc<tokio::sync::Mutex<LateRun>>;

/// How long a job's last late run is remembered: slots due before it that
/// arrive later still find it in the ledger.
const LATE_RUNS_KEPT: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// Entries past which the map is first swept of old ones.
const LATE_RUNS_SWEEP_AT: usize = 100_000;

impl Default for LateRuns {
    fn default() -> Self {
        let inner = LateRunsInner { jobs: Default::default(), sweep_at: LATE_RUNS_SWEEP_AT };
        Self { inner: std::sync::Mutex::new(inner) }
    }
}

impl LateRuns {
    /// The job's entry, to lock while one of its late slots is decided.
    pub(crate) fn of(&self, job_id: uuid::Uuid) -> LastLateRun {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.jobs.len() >= inner.sweep_at {
            let kept_after = runtime::clock::now() - LATE_RUNS_KEPT;
            // A locked entry is being decided: kept.
            inner.jobs.retain(|_, run| run.try_lock().map_or(true, |run| run.is_some_and(|(_, at)| at > kept_after)));
            inner.sweep_at = LATE_RUNS_SWEEP_AT.max(2 * inner.jobs.len());
        }
        inner.jobs.entry(job_id).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn late_runs_forget_old_jobs_only_when_the_map_grows_and_keep_recent_ones() {
        let runs = LateRuns::default();
        let now = runtime::clock::now();
        let old = now - LATE_RUNS_KEPT - chrono::TimeDelta::seconds(1);
        let recent_job = uuid::Uuid::now_v7();
        *runs.of(recent_job).lock().await = Some((now, now));
        for _ in 1..LATE_RUNS_SWEEP_AT {
            *runs.of(uuid::Uuid::now_v7()).lock().await = Some((old, old));
        }
        assert_eq!(runs.inner.lock().unwrap().jobs.len(), LATE_RUNS_SWEEP_AT, "not swept below the size");
        // The next job's lookup sweeps: only the recent entry and the new one stay.
        runs.of(uuid::Uuid::now_v7());
        let inner = runs.inner.lock().unwrap();
        assert_eq!(inner.jobs.len(), 2);
        assert!(inner.jobs.contains_key(&recent_job));
        assert_eq!(inner.sweep_at, LATE_RUNS_SWEEP_AT, "the next sweep waits for the map to grow again");
    }
}
