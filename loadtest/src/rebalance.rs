//! How much ownership moves when the cluster is scaled: the share of jobs
//! whose owner set changes, and the share of (job, owner) assignments that
//! move, computed with the scheduler's own rendezvous function.

use serde_json::json;
use uuid::Uuid;

#[derive(clap::Args)]
pub struct RebalanceArgs {
    #[arg(long, default_value_t = 1_000_000)]
    jobs: usize,
    #[arg(long, default_value_t = 3)]
    from: usize,
    #[arg(long, default_value_t = 4)]
    to: usize,
    #[arg(long, default_value_t = 2)]
    replication_factor: usize,
}

pub fn run(args: RebalanceArgs) -> anyhow::Result<()> {
    let nodes = |n: usize| (0..n).map(|i| format!("cronshard-scheduler-{i}")).collect::<Vec<_>>();
    let (before, after) = (nodes(args.from), nodes(args.to));
    let (mut jobs_moved, mut assignments_moved) = (0usize, 0usize);
    for _ in 0..args.jobs {
        let job = Uuid::new_v4();
        let old = domain::ownership::owners(job, &before, args.replication_factor);
        let new = domain::ownership::owners(job, &after, args.replication_factor);
        let gained = new.iter().filter(|n| !old.contains(n)).count();
        if gained > 0 {
            jobs_moved += 1;
        }
        assignments_moved += gained;
    }
    let total_assignments = args.jobs * args.replication_factor.min(args.to);
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "jobs": args.jobs, "from_nodes": args.from, "to_nodes": args.to, "replication_factor": args.replication_factor,
            "jobs_with_an_owner_change": jobs_moved as f64 / args.jobs as f64,
            "assignments_moved": assignments_moved as f64 / total_assignments as f64,
        }))?
    );
    Ok(())
}
