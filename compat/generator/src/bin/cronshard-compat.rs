//! `cronshard-compat`: writes this build's compatibility corpus, or reads
//! another release's with this build's code (`deploy/compat.sh` runs both).
//!
//!   cronshard-compat write DIR --commit HASH [--schema MIGRATIONS_DIR]
//!   cronshard-compat read DIR --migrations MIGRATIONS_DIR
//!
//! `write --schema` runs the database scenario on a database migrated by
//! that directory (this build's statements on another release's schema),
//! and leaves the corpus's rows from it. `read` reads the corpus at DIR:
//! its messages, key layout, heartbeat and queue declarations, and its rows
//! on a database migrated by MIGRATIONS_DIR (the corpus's own release's);
//! then runs this build's migrations and its database scenario on such a
//! database (this build's statements on the other schema). Services come
//! from TEST_DATABASE_URL, TEST_REDIS_URL and TEST_AMQP_URL (the local
//! ones by default). Exits 1 when anything failed.

use std::path::PathBuf;

use compat::{Report, Services, check, corpus::Corpus, db, generate};

fn usage() -> ! {
    eprintln!(
        "usage: cronshard-compat write DIR --commit HASH [--schema MIGRATIONS_DIR]\n       cronshard-compat read DIR --migrations MIGRATIONS_DIR"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let option = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(PathBuf::from);
    let (Some(command), Some(dir)) = (args.first(), args.get(1).map(PathBuf::from)) else { usage() };
    let services = Services::from_env();
    match command.as_str() {
        "write" => {
            let commit = option("--commit").unwrap_or_else(|| usage());
            let schema = option("--schema");
            generate::write(&dir, &services, &commit.to_string_lossy(), schema.as_deref()).await?;
            println!("wrote {}", dir.display());
        }
        "read" => {
            let migrations_dir = option("--migrations").unwrap_or_else(|| usage());
            let corpus = Corpus::load(&dir)?;
            let migrations = db::migrations_in(&migrations_dir)?;
            let mut report = Report::default();
            check::messages(&mut report, &corpus);
            check::redis(&mut report, &corpus, &services).await?;
            check::amqp(&mut report, &corpus, &services).await?;
            check::db(&mut report, &corpus, &services, &migrations).await?;
            // This build's statements on the other release's schema.
            report.checked += 1;
            if let Err(e) = generate::db_scenario(&services, Some(&migrations_dir)).await {
                report.fail(format!("this release's database scenario fails on the corpus's schema: {e:#}"));
            }
            // This build's migration runner on the other release's schema
            // (a rollback that runs the older `cronshard-api migrate`).
            let temp = db::TempDb::create(&services.database_url, "migrate").await?;
            db::apply(&temp.url, &migrations).await?;
            if let Err(e) = store::db::migrate(&temp.url).await {
                report.note(format!(
                    "this release's `cronshard-api migrate` refuses the corpus's schema: {e:#} \
                     (roll back without running it: `helm rollback` runs no migration hook)"
                ));
            }
            print!("{}", report.text());
            if !report.failures.is_empty() {
                std::process::exit(1);
            }
        }
        _ => usage(),
    }
    Ok(())
}
