//! What an upgrade promises (docs/operations.md, "Upgrades"), checked
//! against the previous release named in `deploy/previous-release`:
//!
//! - its corpus (`compat/<short hash>/`, written by its own code) is read
//!   by this release with the meaning it was written with;
//! - this release writes exactly what `compat/current/` holds, so that a
//!   change to the message format, the Redis keys or the queue arguments
//!   fails here until `deploy/compat.sh` regenerates the corpus, and with it
//!   checks that the previous release reads it;
//! - the previous release's rows survive this release's migrations and are
//!   read by its store, its statements still prepare, and this release's
//!   rows satisfy the previous release's schema.
//!
//! Services come from `TEST_DATABASE_URL`, `TEST_REDIS_URL` and
//! `TEST_AMQP_URL`, as for every other test. The previous release's
//! migrations are read from git; without its history (a shallow clone)
//! the database tests say so and pass.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use broker::properties;
use compat::corpus::{Corpus, masked_heartbeat, shape};
use compat::{Report, Services, amqp_wire, check, db, generate};
use domain::job::{CompletionMode, Jitter, MisfirePolicy, Overlap, Target};
use domain::message::FireMessage;
use domain::slot::{Status, Trigger};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The previous release's commit, from `deploy/previous-release`.
fn previous_commit() -> String {
    let path = repo().join("deploy/previous-release");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let commit = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or_default();
    assert!(
        commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{}: the first line that is not a comment must be a full commit hash, not {commit:?}",
        path.display()
    );
    commit.to_owned()
}

fn previous_corpus() -> Corpus {
    let commit = previous_commit();
    let dir = repo().join("compat").join(&commit[..7]);
    let corpus = Corpus::load(&dir)
        .unwrap_or_else(|e| panic!("{e:#}: generate the previous release's corpus with deploy/compat.sh"));
    assert_eq!(corpus.release["commit"], commit.as_str(), "{} was generated from another commit", dir.display());
    corpus
}

fn committed_current() -> Corpus {
    Corpus::load(&repo().join("compat/current")).unwrap_or_else(|e| panic!("{e:#}: run deploy/compat.sh"))
}

/// The previous release's migrations, or `None` (said) without its history.
fn previous_migrations() -> Option<Vec<db::Migration>> {
    let commit = previous_commit();
    let migrations = db::migrations_at(&repo(), &commit);
    if migrations.is_none() {
        eprintln!(
            "SKIPPED: commit {commit} (deploy/previous-release) or git is not available here (a shallow clone?): \
             the previous release's migrations cannot be read, so its schema is not checked"
        );
    }
    migrations
}

fn assert_clean(report: &Report, what: &str) {
    assert!(report.failures.is_empty(), "{what}:\n{}", report.text());
}

/// The fire messages and properties of a corpus item, as this release reads them.
fn read_item(corpus: &Corpus, name: &str) -> (Vec<FireMessage>, lapin::BasicProperties) {
    let item = corpus
        .messages
        .as_array()
        .and_then(|items| items.iter().find(|i| i["name"] == name))
        .unwrap_or_else(|| panic!("no message {name} in the corpus"));
    let body = item["amqp"]["body"].as_str().expect("a body");
    let messages = domain::message::parse_body(body.as_bytes()).expect("the body parses");
    (messages, amqp_wire::properties_of(&item["amqp"]["properties"]).expect("the properties read"))
}

#[tokio::test]
async fn previous_release_corpus_is_read_with_its_meaning() {
    let corpus = previous_corpus();
    let services = Services::from_env();
    let mut report = Report::default();
    check::messages(&mut report, &corpus);
    check::redis(&mut report, &corpus, &services).await.unwrap();
    check::amqp(&mut report, &corpus, &services).await.unwrap();
    assert_clean(&report, "this release reads the previous release's corpus differently");
    assert!(report.checked >= 25, "too little was checked:\n{}", report.text());

    // The fields a worker acts on, one by one, beside the comparison with
    // each item's input above.
    let (m, p) = read_item(&corpus, "scheduled-minimal");
    assert_eq!((m.len(), m[0].trigger, m[0].misfire), (1, Trigger::Schedule, Some(MisfirePolicy::Skip)));
    assert_eq!(m[0].namespace, "default");
    assert_eq!(m[0].execution_id, format!("{}@2031-03-05T08:00:00.000Z", compat::cases::JOB_A));
    assert_eq!(properties::attempt_of(&p), 1);
    assert_eq!(p.content_type().as_ref().map(|c| c.as_str()), Some("application/json"));

    let (m, _) = read_item(&corpus, "scheduled-every-field");
    let m = &m[0];
    let retry = m.retry.expect("a retry policy");
    assert_eq!((retry.max_retries, retry.base_delay_ms, retry.jitter), (5, 1000, Jitter::Full));
    assert_eq!(
        (m.overlap, m.misfire, m.starting_deadline_ms),
        (Overlap::Forbid, Some(MisfirePolicy::FireOnce), Some(300_000))
    );
    let completion = m.completion.expect("a completion");
    assert_eq!((completion.mode, completion.timeout_ms), (CompletionMode::Async, 7_200_000));
    assert_eq!(m.due_at - m.scheduled_at, chrono::TimeDelta::milliseconds(1250));
    let Target::Http(http) = &m.target else { panic!("an HTTP target: {:?}", m.target) };
    assert_eq!((http.method.as_str(), http.timeout_ms, http.follow_redirects), ("PUT", 15_000, true));
    assert_eq!(http.secret_headers.get("Authorization").map(String::as_str), Some("sealed:v1:compat:AAAA"));
    assert_eq!(http.success.as_ref().and_then(|s| s.body_matches.as_deref()), Some("state.*done"));
    assert_eq!(http.retry_statuses.as_ref().map(Vec::len), Some(2));

    let (m, _) = read_item(&corpus, "manual-sqs");
    let m = &m[0];
    assert_eq!((m.trigger, m.overlap, m.retry_from), (Trigger::Manual, Overlap::Replace, 2));
    assert!(m.after_completion.is_delete());
    let Target::Sqs(sqs) = &m.target else { panic!("an SQS target: {:?}", m.target) };
    assert_eq!(sqs.message_group_id.as_deref(), Some("reports"));
    assert_eq!(sqs.message_attributes.get("team").map(String::as_str), Some("payments"));

    assert_eq!(read_item(&corpus, "misfire-catch-up").0[0].trigger, Trigger::Misfire);
    assert_eq!(read_item(&corpus, "backfill").0[0].trigger, Trigger::Backfill);
    let (m, p) = read_item(&corpus, "bundle");
    assert_eq!(m.len(), 2);
    assert_eq!(p.content_type().as_ref().map(|c| c.as_str()), Some(properties::BUNDLE_CONTENT_TYPE));
    assert_eq!(properties::attempt_of(&read_item(&corpus, "retry-attempt").1), 4);
    let (_, p) = read_item(&corpus, "wait-for-destination");
    assert!(properties::is_wait(&p) && !properties::is_completion_check(&p));
    assert_eq!(properties::attempt_of(&p), 2);
    assert!(properties::is_completion_check(&read_item(&corpus, "completion-check").1));
    let (_, p) = read_item(&corpus, "parked-failed");
    assert_eq!(properties::attempt_of(&p), 6);
    assert_eq!(p.expiration().as_ref().map(|e| e.as_str()), Some("604800000"));

    // A heartbeat of the previous release's schedulers counts its factor.
    let beat: Value = serde_json::from_str(corpus.redis["heartbeat"]["document"].as_str().unwrap()).unwrap();
    assert_eq!(domain::ownership::heartbeat_replication_factor(&beat), 2);
}

#[tokio::test]
async fn current_output_matches_the_committed_corpus() {
    let services = Services::from_env();
    let now = generate::corpus(&services, "current", None).await.unwrap();
    let committed = committed_current();
    let regenerate = "regenerate with deploy/compat.sh, which also checks that the previous release reads it, \
                      and commit compat/current/";
    assert_eq!(now.messages, committed.messages, "the AMQP messages changed: {regenerate}");
    assert_eq!(now.amqp, committed.amqp, "the queue declarations or the publishes changed: {regenerate}");
    assert_eq!(now.redis["keys"], committed.redis["keys"], "the Redis key layout changed: {regenerate}");
    let beat = |c: &Corpus| {
        let mut b = c.redis["heartbeat"].clone();
        b["document"] = masked_heartbeat(b["document"].as_str().unwrap_or_default());
        b
    };
    assert_eq!(beat(&now), beat(&committed), "the scheduler's heartbeat changed: {regenerate}");
    assert_eq!(shape(&now.db_rows), shape(&committed.db_rows), "the rows the store writes changed: {regenerate}");

    // Every value of the lists the previous release must read is in the
    // corpus: a new trigger or status cannot bypass the previous
    // release's reader (as `backfill` once did).
    let triggers: Vec<String> = committed
        .messages
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["input"]["messages"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m["trigger"].as_str().map(str::to_owned))
        .collect();
    for trigger in Trigger::ALL {
        assert!(
            triggers.iter().any(|t| t == trigger.as_str()),
            "no message of trigger {trigger:?} in compat/current: add one to compat/generator/src/cases.rs"
        );
    }
    let rows = |table: &str, column: &str| -> Vec<Value> {
        committed.db_rows[table].as_array().into_iter().flatten().map(|r| r[column].clone()).collect()
    };
    for trigger in Trigger::ALL {
        assert!(
            rows("scheduled_jobs", "trigger").contains(&json!(trigger.as_str())),
            "no ledger row of trigger {trigger:?} in compat/current: extend the scenario in compat/generator"
        );
    }
    for status in Status::ALL {
        assert!(
            rows("scheduled_jobs", "status").contains(&json!(status.as_str())),
            "no ledger row of status {status:?} in compat/current: extend the scenario in compat/generator"
        );
    }
}

#[tokio::test]
async fn previous_release_rows_survive_the_current_migrations() {
    let Some(migrations) = previous_migrations() else { return };
    let corpus = previous_corpus();
    let services = Services::from_env();

    // The upgrade: the previous release's schema and rows, then this
    // release's migrations (refinery refuses a released migration edited
    // since), then this release's store reads every row.
    let upgraded = db::TempDb::create(&services.database_url, "upgrade").await.unwrap();
    db::apply(&upgraded.url, &migrations).await.unwrap();
    let refused = db::restore(&upgraded.url, &corpus.db_rows).await.unwrap();
    assert!(refused.is_empty(), "the previous release's own schema refuses its rows: {refused:?}");
    store::db::migrate(&upgraded.url).await.expect("this release's migrations apply over the previous release's rows");
    let mut report = Report::default();
    check::db_rows(&mut report, &upgraded.url, &corpus.db_rows).await.unwrap();
    assert_clean(&report, "this release reads the previous release's rows differently after its migrations");
    assert!(report.checked >= 15, "too little was checked:\n{}", report.text());

    // The previous release's statements, still running during the roll,
    // prepare on the migrated schema (a renamed or dropped column or table
    // fails here).
    let client = store::db::connect(&upgraded.url).await.unwrap();
    let mut failed = Vec::new();
    let statements = corpus.db_statements.as_array().cloned().unwrap_or_default();
    for sql in statements.iter().filter_map(Value::as_str) {
        if let Err(e) = client.prepare(sql).await {
            failed.push(format!(
                "{}\n  {sql}",
                e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned())
            ));
        }
    }
    assert!(statements.len() >= 10, "too few statements recorded: {}", statements.len());
    assert!(
        failed.is_empty(),
        "statements of the previous release fail on the migrated schema:\n{}",
        failed.join("\n")
    );

    // Its rows as its statements write them, only the columns it knows, on
    // the migrated schema (a new NOT NULL column without a default, or a
    // stricter CHECK, refuses them).
    let fresh = db::TempDb::create(&services.database_url, "upgrade_new").await.unwrap();
    store::db::migrate(&fresh.url).await.unwrap();
    let refused = db::restore(&fresh.url, &corpus.db_rows).await.unwrap();
    let refused: Vec<String> = refused.iter().map(|r| format!("{}: {}: {}", r.table, r.error, r.row)).collect();
    assert!(
        refused.is_empty(),
        "the migrated schema refuses rows the previous release writes:\n{}",
        refused.join("\n")
    );
}

#[tokio::test]
async fn current_rows_fit_the_previous_schema() {
    let Some(migrations) = previous_migrations() else { return };
    let current = committed_current();
    let services = Services::from_env();
    // What this release writes, seen through the previous release's schema:
    // the columns it has, its CHECK constraints (the states, triggers,
    // modes and overlap policies the previous release's readers know: each
    // is tested there against its CHECK), its NOT NULL columns and types.
    // Foreign keys and triggers are not applied.
    let old = db::TempDb::create(&services.database_url, "downgrade").await.unwrap();
    db::apply(&old.url, &migrations).await.unwrap();
    // A table the previous release does not have is one it never reads.
    let refused = db::restore(&old.url, &current.db_rows).await.unwrap();
    let refused: Vec<String> =
        refused.iter().filter(|r| !r.no_table).map(|r| format!("{}: {}: {}", r.table, r.error, r.row)).collect();
    assert!(
        refused.is_empty(),
        "rows this release writes break the previous release's schema (its readers cannot take them):\n{}",
        refused.join("\n")
    );
}
