//! Databases for the corpus: a fresh one per use, migrations from a
//! directory or from a commit in git (an older release's, without checking
//! it out), and the rows of a database as JSON, out and back in.

use std::path::Path;

use anyhow::Context;
use serde_json::{Map, Value};

/// A freshly created database, dropped with this value.
pub struct TempDb {
    pub name: String,
    pub url: String,
    admin: String,
}

impl TempDb {
    pub async fn create(admin_url: &str, label: &str) -> anyhow::Result<TempDb> {
        let name = format!("cronshard_compat_{label}_{}", uuid::Uuid::new_v4().simple());
        let admin = store::db::connect(admin_url).await.context("connecting to Postgres")?;
        admin.batch_execute(&format!("CREATE DATABASE \"{name}\"")).await?;
        Ok(TempDb { url: with_database(admin_url, &name), name, admin: admin_url.to_owned() })
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Dropped outside any runtime guarantee: a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async move {
                let client = store::db::connect(&admin).await.ok()?;
                client.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await.ok()
            })
        })
        .join();
    }
}

/// `url` naming database `name` instead.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = base[scheme_end..].find('/').map_or(base, |i| &base[..scheme_end + i]);
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

/// A migration as refinery names it (`V3__execution_history`) and its SQL.
pub type Migration = (String, String);

/// The migrations of a `migrations/` directory.
pub fn migrations_in(dir: &Path) -> anyhow::Result<Vec<Migration>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "sql") {
            let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
            out.push((name, std::fs::read_to_string(&path)?));
        }
    }
    Ok(out)
}

/// The migrations of `commit`, read from git in `repo` (`None` when git or
/// the commit is not there, as in a shallow clone).
pub fn migrations_at(repo: &Path, commit: &str) -> Option<Vec<Migration>> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let listing = git(&["ls-tree", "--name-only", &format!("{commit}:migrations")])?;
    let mut out = Vec::new();
    for file in listing.lines().filter(|f| f.ends_with(".sql")) {
        let sql = git(&["show", &format!("{commit}:migrations/{file}")])?;
        out.push((file.trim_end_matches(".sql").to_owned(), sql));
    }
    (!out.is_empty()).then_some(out)
}

/// Applies `migrations` as refinery does (and records them in its history
/// table, so that a later `store::db::migrate` sees them as applied).
pub async fn apply(url: &str, migrations: &[Migration]) -> anyhow::Result<()> {
    let list = migrations
        .iter()
        .map(|(name, sql)| refinery::Migration::unapplied(name, sql))
        .collect::<Result<Vec<_>, _>>()?;
    let mut client = store::db::connect(url).await?;
    refinery::Runner::new(&list).run_async(&mut client).await.context("applying migrations")?;
    Ok(())
}

/// The tables a corpus holds: every table of the schema but refinery's
/// history, partitions read through their parent.
async fn tables(client: &tokio_postgres::Client) -> anyhow::Result<Vec<String>> {
    Ok(client
        .query(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
               AND c.relname <> 'refinery_schema_history'
             ORDER BY c.relname",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Every row of every table, as `{table: [row as JSON, ...]}`, each table's
/// rows in a fixed order.
pub async fn dump(url: &str) -> anyhow::Result<Value> {
    let client = store::db::connect(url).await?;
    let mut out = Map::new();
    for table in tables(&client).await? {
        let rows: Value = client
            .query_one(
                &format!(
                    "SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY to_jsonb(t)::text), '[]'::jsonb) FROM \"{table}\" t"
                ),
                &[],
            )
            .await?
            .get(0);
        out.insert(table, rows);
    }
    Ok(Value::Object(out))
}

/// One row a schema refused, and why.
#[derive(Debug, Clone)]
pub struct Refused {
    pub table: String,
    pub row: Value,
    pub error: String,
    /// The schema has no such table (all its rows are refused).
    pub no_table: bool,
}

/// Inserts `rows` (as [`dump`] writes them) as they are, the way an older
/// or newer release's statement would: only the columns both the row and
/// the table have are written, the table's defaults fill the rest.
/// Triggers are off (the rows come with what the triggers wrote, e.g.
/// `job_changes`), and so are foreign keys with them; CHECK and NOT NULL
/// constraints and the column types apply. A row whose key is taken is
/// skipped: the migrations' own rows (the `default` namespace) are in both. Returns the rows refused; a
/// table the schema does not have at all refuses its rows.
pub async fn restore(url: &str, rows: &Value) -> anyhow::Result<Vec<Refused>> {
    let client = store::db::connect(url).await?;
    client.batch_execute("SET session_replication_role = replica").await?;
    let mut refused = Vec::new();
    let Some(tables) = rows.as_object() else { anyhow::bail!("the corpus's rows are not a table map") };
    for (table, table_rows) in tables {
        let columns: Vec<String> = client
            .query(
                "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'public' AND c.relname = $1 AND a.attnum > 0 AND NOT a.attisdropped
                   AND a.attgenerated = ''",
                &[table],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for row in table_rows.as_array().into_iter().flatten() {
            if columns.is_empty() {
                refused.push(Refused {
                    table: table.clone(),
                    row: row.clone(),
                    error: "the schema has no such table".into(),
                    no_table: true,
                });
                continue;
            }
            let named: Vec<String> =
                columns.iter().filter(|c| row.get(c.as_str()).is_some()).map(|c| format!("\"{c}\"")).collect();
            let list = named.join(", ");
            let sql = format!(
                "INSERT INTO \"{table}\" ({list}) OVERRIDING SYSTEM VALUE
                 SELECT {list} FROM jsonb_populate_record(NULL::\"{table}\", $1) ON CONFLICT DO NOTHING"
            );
            if let Err(e) = client.execute(&sql, &[row]).await {
                let error = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
                refused.push(Refused { table: table.clone(), row: row.clone(), error, no_table: false });
            }
        }
    }
    Ok(refused)
}
