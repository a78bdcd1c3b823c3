//! The command line. Every subcommand's `--help` ends with examples (lines
//! starting `$ cronshard`); the CLI's tests run each of them against a real
//! API, with `$JOB` a job's id, `$AT` one of its failed slots, `$BACKFILL` a
//! running backfill (of another job), and the files of `cli/examples/` in the
//! working directory.

use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use crate::output::Format;

const TOP_HELP: &str = "\
Configuration:
  Each setting is taken from the first of: its flag, its environment variable
  (CRONSHARD_URL, CRONSHARD_TOKEN, CRONSHARD_OUTPUT, CRONSHARD_NAMESPACE), the
  context in use (--context, CRONSHARD_CONTEXT, else the config file's current
  context; see `cronshard config --help`), the default. Prefer a context or
  CRONSHARD_TOKEN to --token: a flag shows in the process list. A context's token
  is sent only to its own URL. --help never shows the token's or the URL's value.

Output:
  -o table (default) prints aligned columns with instants in UTC (RFC 3339, ms);
  -o json prints the API's JSON unchanged (with --all: one page holding every item);
  -o yaml prints the same document as YAML.

Exit codes:
  0  success
  1  any other failure (an answer the CLI cannot read)
  2  usage or invalid input: a bad flag, an unreadable file, the API's 400/413/415/422
     (each invalid field is printed as `field: message`)
  3  not found (404), or no such context
  4  conflict or stale version (409, 412)
  5  server error (5xx) or the API cannot be reached (the URL is named)
  6  unauthorized or forbidden (401, 403)
  7  `cronshard diff` only: the documents differ from the cluster

Examples:
  $ cronshard jobs list
  $ cronshard -o json jobs get $JOB
  $ cronshard --context prod jobs describe nightly-report
  $ cronshard preview --cron '30 2 * * *' --tz Europe/Berlin --from 2026-03-28T00:00:00Z --count 3";

/// The heading of the flags every subcommand takes.
const GLOBAL: &str = "Global options";

/// cronshard: manage jobs, executions, calendars and alerts of a cronshard
/// cluster through its REST API.
#[derive(Parser, Debug)]
#[command(name = "cronshard", version, after_help = TOP_HELP, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug)]
pub struct Global {
    /// The API's base URL (default http://127.0.0.1:8080).
    #[arg(long, global = true, help_heading = GLOBAL, env = "CRONSHARD_URL", hide_env_values = true)]
    pub url: Option<String>,

    /// Bearer token (sent as `Authorization: Bearer`). Prefer a context or
    /// the environment variable: a flag shows in the process list.
    #[arg(long, global = true, help_heading = GLOBAL, env = "CRONSHARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Output format (default table).
    #[arg(short = 'o', long, global = true, help_heading = GLOBAL, env = "CRONSHARD_OUTPUT", value_enum)]
    pub output: Option<Format>,

    /// Namespace of new jobs, calendars, alert channels and rules, and the one
    /// `jobs list`, `jobs bulk`, `apply`, `calendars`, `signing-keys`, `audit`,
    /// `channels list` and `alerts rules list` act in (default: the token's
    /// only namespace, or `default`).
    #[arg(long, global = true, help_heading = GLOBAL, env = "CRONSHARD_NAMESPACE")]
    pub namespace: Option<String>,

    /// The context of the config file to use for this command (instead of
    /// its current context).
    #[arg(long, global = true, help_heading = GLOBAL, env = "CRONSHARD_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,

    /// Why you make this change (at most 500 characters): recorded as the
    /// reason in the audit log, sent as `X-Audit-Reason` with every write.
    /// A command's own --note takes its place.
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "TEXT")]
    pub reason: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create, list, show, change, delete, pause, resume, fire and backfill jobs.
    #[command(
        subcommand,
        after_help = "Examples:
  $ cronshard jobs create -f job.yaml
  $ cronshard jobs list --selector team=payments
  $ cronshard jobs edit $JOB --set retry.max_retries=5"
    )]
    Jobs(Jobs),
    /// Make the cluster's jobs and calendars match files (jobs as code).
    #[command(after_help = "Each FILE is YAML (documents separated by ---) or JSON; a DIR is read
recursively for *.yaml, *.yml and *.json, in sorted order (names starting with a
dot skipped); - is stdin. A document is one object or a list of objects, each
with `kind: Job` (the default) or `kind: Calendar`; the rest of a Job is the job
as POST /v1/jobs takes it plus its `key` (its identity), the rest of a Calendar
is the calendar with its `name`. Every document goes in one request, applied in
one transaction: all or nothing. An existing job keeps its state (paused stays
paused). --namespace is the namespace of documents that name none.

--prune --selector S also deletes the live jobs with a key that match S and that
the documents no longer name (never a job without a key, never a calendar).
--dry-run computes and shows the same result and changes nothing.

In target.secret_headers values, ${VAR} is replaced by the environment variable
VAR (an unset one is an error naming the file; nothing is sent), so secrets
stay out of the files.

Examples:
  $ cronshard apply -f jobs/
  $ cronshard apply -f jobs/ --prune --selector team=examples
  $ cronshard apply -f jobs/nightly-report.yaml --dry-run
  $ cronshard apply -f jobs/ -o json | jq .summary")]
    Apply(Apply),
    /// Show what `apply` would change, and exit 7 if anything would.
    #[command(after_help = "The same request as `apply --dry-run` (the same files, --prune and
--selector): each job or calendar that would be created, changed or deleted,
with each changed field as `path: before -> after` (secret values as ***).
Exit code 0: nothing would change; 7: something would; any other: a failure.

Examples:
  $ cronshard diff -f jobs/
  $ cronshard diff -f jobs/ --prune --selector team=examples
  $ cronshard diff -f jobs/ -o json")]
    Diff(Documents),
    /// List executions (ledger rows), explain a slot, replay failures.
    #[command(
        subcommand,
        after_help = "Examples:
  $ cronshard executions list --job $JOB --status failed
  $ cronshard executions explain $JOB $AT
  $ cronshard executions replay $JOB $AT"
    )]
    Executions(Executions),
    /// Manage calendars of excluded days and times.
    #[command(
        subcommand,
        after_help = "Examples:
  $ cronshard calendars put holidays -f holidays.yaml
  $ cronshard calendars list"
    )]
    Calendars(Calendars),
    /// Follow and cancel backfills (`jobs backfill` makes one).
    #[command(
        subcommand,
        after_help = "Examples:
  $ cronshard backfills list --job $JOB
  $ cronshard backfills get $BACKFILL
  $ cronshard backfills cancel $BACKFILL"
    )]
    Backfills(Backfills),
    /// Make, rotate, list and revoke the keys that sign a namespace's deliveries.
    #[command(
        subcommand,
        name = "signing-keys",
        after_help = "Examples:
  $ cronshard signing-keys create
  $ cronshard signing-keys rotate --overlap-seconds 3600
  $ cronshard signing-keys list"
    )]
    SigningKeys(SigningKeys),
    /// Who changed what, when and why: the audit log, newest first (admin role).
    #[command(after_help = "Each entry: when, the namespace, who (the token's name), the action
(job.create, job.patch, job.pause, job.rollback, calendar.put, token.create,
alert_rule.update, ...), what it changed (the job and the version it made, or
the resource's name or id), the reason given (a --note, or --reason), and the
paths of the fields changed (or the change's details). --action takes an action
or a resource (job: every job action). --namespace narrows to one namespace.

Examples:
  $ cronshard audit --job $JOB
  $ cronshard audit --action job.pause --since 2026-12-01T00:00:00Z
  $ cronshard audit --actor 'bootstrap token #1' --limit 20
  $ cronshard audit --action job --all -o json")]
    Audit(AuditList),
    /// Create, list and delete the channels alert notices are sent to.
    #[command(
        subcommand,
        after_help = "Examples:
  $ CRONSHARD_CHANNEL_URL=$SLACK_URL cronshard channels create --name ops-slack --kind slack
  $ cronshard channels list
  $ cronshard channels delete $CHANNEL"
    )]
    Channels(Channels),
    /// Alert rules (what to watch, where to send), and the incidents they opened.
    #[command(
        subcommand,
        after_help = "Examples:
  $ cronshard alerts rules create --name sales-failing --job $JOB --condition failed --channel $CHANNEL
  $ cronshard alerts rules list
  $ cronshard alerts list --open"
    )]
    Alerts(Alerts),
    /// Keep named contexts (URL, namespace, output, token) in the config file.
    #[command(
        subcommand,
        after_help = "The file is $CRONSHARD_CONFIG, else $XDG_CONFIG_HOME/cronshard/config.yaml, else
~/.config/cronshard/config.yaml; it is written with mode 0600 (it may hold
tokens). A context supplies what no flag and no environment variable gives: its
url, namespace and output, and its token, which is sent only to its own url.
--context NAME (or CRONSHARD_CONTEXT) picks a context for one command instead of
the current one.

Examples:
  $ cronshard config get-contexts
  $ cronshard config use-context prod
  $ cronshard --context prod jobs list"
    )]
    Config(Config),
    /// Show the live scheduler nodes and the Redis shards.
    #[command(after_help = "Examples:
  $ cronshard cluster
  $ cronshard cluster -o json")]
    Cluster,
    /// Show the fire times a schedule would have, with local time and DST marks.
    #[command(after_help = "The schedule is --cron EXPR (with --tz), --every-ms N or -f FILE, where FILE
holds a schedule ({kind, expr, timezone, ...}) or a whole preview request
({schedule, from, count, jitter_ms, job_id}); --from and --count override the file's.
Nothing is stored.

Examples:
  $ cronshard preview --cron '30 2 * * *' --tz Europe/Berlin --from 2026-03-28T00:00:00Z --count 3
  $ cronshard preview --cron '*/30 * * * *' --tz Europe/Berlin --from 2026-10-24T23:30:00Z --count 5
  $ cronshard preview --every-ms 3600000 --count 3
  $ cronshard preview -f schedule.yaml --from 2026-10-24T00:00:00Z")]
    Preview(Preview),
    /// Print a shell completion script.
    #[command(after_help = "Load it in the current bash, or save it where your shell looks for completions
(bash: ~/.local/share/bash-completion/completions/cronshard, zsh: a directory on
$fpath as _cronshard, fish: ~/.config/fish/completions/cronshard.fish).

Examples:
  $ source <(cronshard completions bash)
  $ cronshard completions zsh > _cronshard
  $ cronshard completions fish > cronshard.fish")]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand, Debug)]
pub enum Jobs {
    /// Create a job from a JSON or YAML definition.
    #[command(after_help = "The file holds a job as POST /v1/jobs takes it (name, schedule, target, and
optionally retry, misfire, labels, overlap, jitter_ms, calendars, paused, namespace).

Examples:
  $ cronshard jobs create -f job.yaml
  $ cronshard jobs create -f job.json -o json
  $ cat job.json | cronshard jobs create -f -
  $ cronshard jobs create -f job.yaml --namespace default")]
    Create {
        /// The definition: a .json or .yaml file, or - for stdin.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
    },
    /// List jobs, filtered by labels, name, kind or state.
    #[command(after_help = "Examples:
  $ cronshard jobs list
  $ cronshard jobs list --selector 'team=payments,tier!=batch'
  $ cronshard jobs list --selector 'tier in (web,batch),!legacy' --paused false
  $ cronshard jobs list --name-prefix daily --kind cron --limit 20
  $ cronshard jobs list --all -o json")]
    List(JobList),
    /// Show a job.
    #[command(after_help = "Examples:
  $ cronshard jobs get $JOB
  $ cronshard jobs get $JOB -o yaml")]
    Get {
        /// The job: its id, its key, or namespace:key.
        id: String,
    },
    /// Show a job whole: its definition, its state, its next fire times and its
    /// last executions.
    #[command(after_help = "The definition (with its key, misfire and overlap policies, jitter and
calendars), whether it is paused (by whom, when, why), its next fire times
(--next, default 5) and its last executions (--executions, default 10), newest
first, with their status and error or reason. -o json prints
{job, next: {fire_times}, executions: {items}}, each as the API gives it.

Examples:
  $ cronshard jobs describe $JOB
  $ cronshard jobs describe nightly-report
  $ cronshard jobs describe default:nightly-report --next 3 --executions 20 -o yaml")]
    Describe {
        /// The job: its id, its key, or namespace:key.
        id: String,
        /// How many next fire times (1 to 1000).
        #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
        next: u32,
        /// How many of the last executions (1 to 500).
        #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=500))]
        executions: u32,
    },
    /// Change fields of a job (a JSON Merge Patch), guarded by its version.
    #[command(after_help = "--set path=value sets one field: the path is dotted keys, the value JSON when it
parses as JSON (5, true, null, [\"a\"], \"5\") and text otherwise; null removes the
field, objects merge key by key, arrays are replaced whole. -f FILE is a merge
patch in JSON or YAML; --set is applied on top of it.
The job is read first and the change is sent with If-Match of the version read
(or of --if-version), so a change made meanwhile by someone else is refused with
exit code 4 instead of being overwritten; --force sends no If-Match.

Examples:
  $ cronshard jobs edit $JOB --set schedule.expr='15 3 * * *' --set labels.tier=batch
  $ cronshard jobs edit $JOB --set retry.max_retries=5 --set labels.tier=null
  $ cronshard jobs edit $JOB -f patch.yaml
  $ cronshard jobs edit $JOB --set labels.owner=ana --force")]
    Edit(JobEdit),
    /// Delete a job: it never fires again.
    #[command(after_help = "Examples:
  $ cronshard jobs delete $JOB
  $ cronshard jobs delete $JOB --note 'replaced by the nightly export'")]
    Delete {
        /// The job: its id, its key, or namespace:key.
        id: String,
        /// Why it is deleted (at most 500 characters), recorded in the audit log.
        #[arg(long)]
        note: Option<String>,
    },
    /// Pause a job: its slots are skipped until it is resumed.
    #[command(after_help = "Who paused it, when and why are kept with the job (shown by jobs get)
until it is resumed; a replace or patch of its definition keeps them. The note
is also the reason the audit log records.

Examples:
  $ cronshard jobs pause $JOB
  $ cronshard jobs pause $JOB --note 'receiver maintenance until 14:00'")]
    Pause {
        /// The job: its id, its key, or namespace:key.
        id: String,
        /// Why it is paused (at most 500 characters), for whoever finds it paused.
        #[arg(long)]
        note: Option<String>,
    },
    /// Resume a paused job.
    #[command(after_help = "Examples:
  $ cronshard jobs resume $JOB
  $ cronshard jobs resume $JOB --note 'receiver back'")]
    Resume {
        /// The job: its id, its key, or namespace:key.
        id: String,
        /// Why it is resumed (at most 500 characters), recorded in the audit log.
        #[arg(long)]
        note: Option<String>,
    },
    /// Fire a job once now, outside its schedule.
    #[command(after_help = "Examples:
  $ cronshard jobs trigger $JOB
  $ cronshard jobs trigger $JOB --note 'rerun after the data fix'")]
    Trigger {
        /// The job: its id, its key, or namespace:key.
        id: String,
        /// Why it is fired (at most 500 characters), recorded in the audit log.
        #[arg(long)]
        note: Option<String>,
    },
    /// Show every version a job has had: who made it, how, why, what changed.
    #[command(after_help = "Oldest first: the version, from when it was in force, the job's state then
(live, paused, deleted), its author (the token's name), the action that made it
(job.create, job.patch, job.pause, job.rollback, ...), the reason given, and the
paths of the fields that differ from the version before. -o json prints each
version's whole definition (secret header values as ***) and its changes with
their before and after values. A deleted job's history is shown too.

Examples:
  $ cronshard jobs history $JOB
  $ cronshard jobs history $JOB -o json")]
    History {
        /// The job: its id, its key, or namespace:key.
        id: String,
    },
    /// Give a job an earlier version's definition again, as a new version.
    #[command(after_help = "The job gets a new version whose definition is version --to-version's (its
state, paused or live, stays). The old definition must pass today's validation
and quotas. --if-version rolls back only if the job is still at that version
(exit code 4 otherwise). `jobs history` shows the versions.

Examples:
  $ cronshard jobs rollback $JOB --to-version 1
  $ cronshard jobs rollback $JOB --to-version 1 --if-version 2 --note 'the new schedule overloads the receiver'")]
    Rollback {
        /// The job: its id, its key, or namespace:key.
        id: String,
        /// The version whose definition the job takes again.
        #[arg(long, value_name = "VERSION")]
        to_version: i64,
        /// Why (at most 500 characters), recorded in the audit log.
        #[arg(long)]
        note: Option<String>,
        /// Roll back only if the job is still at this version.
        #[arg(long, value_name = "VERSION")]
        if_version: Option<i64>,
    },
    /// Show a job's next fire times, with local time and DST marks.
    #[command(after_help = "Examples:
  $ cronshard jobs next $JOB
  $ cronshard jobs next $JOB --count 3 --from 2026-10-24T00:00:00Z")]
    Next {
        /// The job: its id, its key, or namespace:key.
        id: String,
        /// How many fire times (1 to 1000; the API's default is 10).
        #[arg(long)]
        count: Option<u32>,
        /// Fire times at or after this RFC 3339 instant (default now).
        #[arg(long, value_name = "TIME")]
        from: Option<String>,
    },
    /// Run a job's past slots in a range: the missing, the failed, or all.
    #[command(after_help = "Each slot of the job's schedule from --from to --to (both included; --to not
in the future, at most 10,000 slots) that --slots takes is run under the slot's
own execution id with trigger `backfill`: missing (the default) takes the slots
without a ledger row, failed the failed ones, all every slot not in flight
(succeeded ones again). The schedulers start at most --rate slots per second
(0.01 to 1000; default 10) with at most --concurrency of them in flight (1 to
100; default 5), so a catch-up does not flood the receiver. --overlap is the
policy its runs follow (default: the job's). A job has at most one running
backfill (exit code 4 otherwise).

--dry-run shows how many slots the range holds and would run, and the first of
them, and changes nothing. --wait follows the backfill, printing its progress
on stderr whenever it changes, until it is done or cancelled (then exit 0), or
until --timeout (then exit 1; the backfill goes on).

Examples:
  $ cronshard jobs backfill $JOB --from 2026-11-01T00:00:00Z --to 2026-11-30T23:59:59Z --dry-run
  $ cronshard jobs backfill $JOB --from 2026-11-01T00:00:00Z --to 2026-11-30T23:59:59Z --slots failed --rate 0.5 --concurrency 2
  $ cronshard jobs backfill $JOB --from 2026-11-23T00:00:00Z --to 2026-11-30T00:00:00Z --order newest-first --overlap forbid -o json")]
    Backfill(BackfillCreate),
    /// Pause, resume, delete or trigger every job a label selector matches.
    #[command(after_help = "All or nothing, at most 5,000 jobs per call. delete needs --yes.

Examples:
  $ cronshard jobs bulk pause --selector team=payments
  $ cronshard jobs bulk resume --selector 'team=payments,tier in (web,batch)'
  $ cronshard jobs bulk trigger --selector team=payments
  $ cronshard jobs bulk delete --selector team=payments --yes")]
    Bulk {
        #[arg(value_enum)]
        action: BulkAction,
        /// A label selector (`k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, joined by commas).
        #[arg(long, short = 'l')]
        selector: String,
        /// Confirms a bulk delete.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Args, Debug)]
pub struct BackfillCreate {
    /// The job: its id, its key, or namespace:key.
    pub id: String,
    /// The first instant of the range (RFC 3339); a slot at it counts.
    #[arg(long, value_name = "TIME")]
    pub from: String,
    /// The last instant of the range (RFC 3339, not in the future); a slot at it counts.
    #[arg(long, value_name = "TIME")]
    pub to: String,
    /// Which slots run (the API's default: missing).
    #[arg(long, value_enum)]
    pub slots: Option<BackfillSlots>,
    /// Which slot runs first (the API's default: oldest-first).
    #[arg(long, value_enum)]
    pub order: Option<BackfillOrder>,
    /// Most slots started per second (0.01 to 1000; the API's default is 10).
    #[arg(long, value_name = "N")]
    pub rate: Option<f64>,
    /// Most of its runs in flight at once (1 to 100; the API's default is 5).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u32>,
    /// The overlap policy its runs follow (default: the job's).
    #[arg(long, value_enum)]
    pub overlap: Option<BackfillOverlap>,
    /// Show the slots it would run; change nothing.
    #[arg(long, conflicts_with = "wait")]
    pub dry_run: bool,
    /// Follow its progress until it is done or cancelled.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up waiting after this long (`90s`, `15m`, `2h`).
    #[arg(long, value_name = "DURATION", requires = "wait", default_value = "1h", value_parser = duration)]
    pub timeout: Duration,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum BackfillSlots {
    Missing,
    Failed,
    All,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum BackfillOrder {
    OldestFirst,
    NewestFirst,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum BackfillOverlap {
    Allow,
    Forbid,
    Replace,
}

#[derive(Subcommand, Debug)]
pub enum Backfills {
    /// List backfills, newest first, with their progress.
    #[command(after_help = "Each backfill: its id, job, range, which slots it takes, its state (running,
cancelled, done) and its progress: the slots handled of those planned, and its
runs in flight, succeeded, failed and skipped.

Examples:
  $ cronshard backfills list
  $ cronshard backfills list --job $JOB --limit 5 -o json")]
    List {
        /// Only this job's backfills (its id, key, or namespace:key).
        #[arg(long, value_name = "JOB")]
        job: Option<String>,
        /// How many (1 to 100; the API's default is 20).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Show a backfill and its progress.
    #[command(after_help = "Examples:
  $ cronshard backfills get $BACKFILL
  $ cronshard backfills get $BACKFILL -o yaml")]
    Get {
        /// The backfill's id.
        id: String,
    },
    /// Cancel a running backfill: no further slot starts; started ones finish.
    #[command(after_help = "A backfill already done or cancelled is shown as it is.

Examples:
  $ cronshard backfills cancel $BACKFILL")]
    Cancel {
        /// The backfill's id.
        id: String,
    },
}

#[derive(Args, Debug)]
pub struct JobList {
    /// Only jobs whose labels match this selector (`k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`).
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// Only jobs whose name starts with this text.
    #[arg(long)]
    pub name_prefix: Option<String>,
    /// Only jobs of this schedule kind: once, interval or cron.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only paused (true) or active (false) jobs.
    #[arg(long, value_name = "true|false", action = ArgAction::Set)]
    pub paused: Option<bool>,
    #[command(flatten)]
    pub paging: Paging,
}

#[derive(Args, Debug)]
pub struct Paging {
    /// Page size (1 to 500; the API's default is 50).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Start after this `next_cursor` of a previous page.
    #[arg(long, conflicts_with = "all")]
    pub cursor: Option<String>,
    /// Follow `next_cursor` until the last page.
    #[arg(long)]
    pub all: bool,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("change").required(true).multiple(true).args(["set", "file"]))]
pub struct JobEdit {
    /// The job: its id, its key, or namespace:key.
    pub id: String,
    /// A field to change, as path=value (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// A merge patch in JSON or YAML (- for stdin).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<String>,
    /// Send no If-Match: apply the change whatever the job's version.
    #[arg(long, conflicts_with = "if_version")]
    pub force: bool,
    /// Apply the change only if the job is still at this version (a
    /// version read earlier), instead of the version read now.
    #[arg(long, value_name = "VERSION")]
    pub if_version: Option<i64>,
}

/// The files `apply` and `diff` read, and what to prune.
#[derive(Args, Debug)]
pub struct Documents {
    /// A YAML or JSON file, a directory read recursively, or - for stdin (repeatable).
    #[arg(short = 'f', long = "file", value_name = "FILE|DIR", required = true)]
    pub files: Vec<String>,
    /// Also delete the live jobs with a key that match --selector and that
    /// the files no longer name.
    #[arg(long, requires = "selector")]
    pub prune: bool,
    /// The label selector of the jobs --prune may delete (`team=payments`, ...).
    #[arg(long, short = 'l', requires = "prune")]
    pub selector: Option<String>,
}

#[derive(Args, Debug)]
pub struct Apply {
    #[command(flatten)]
    pub documents: Documents,
    /// Compute and show the result; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Subcommand, Debug)]
pub enum Config {
    /// Make a context, or change the fields given of an existing one.
    #[command(after_help = "--url is needed for a new context. The global --namespace and -o set the
context's namespace and output (only as flags: the environment variables are
not stored). The token is read from stdin with --token-stdin, so it never shows
in the shell's history or the process list; without it, a context keeps the
token it has. The first context made becomes the current one.

Examples:
  $ printf %s \"$PROD_TOKEN\" | cronshard config set-context prod --url https://cronshard.example.com --namespace payments --token-stdin
  $ cronshard config set-context staging --url https://cronshard.staging.example.com -o yaml")]
    SetContext {
        /// The context's name.
        name: String,
        /// Read the context's token from stdin (a pipe or a file, not a terminal).
        #[arg(long)]
        token_stdin: bool,
    },
    /// Make a context the current one.
    #[command(after_help = "Examples:
  $ cronshard config use-context prod")]
    UseContext {
        /// The context's name.
        name: String,
    },
    /// List the contexts (whether each has a token, never the token).
    #[command(after_help = "Examples:
  $ cronshard config get-contexts
  $ cronshard config get-contexts -o json")]
    GetContexts,
    /// Print the current context's name.
    #[command(after_help = "Examples:
  $ cronshard config current-context")]
    CurrentContext,
    /// Delete a context, with its token.
    #[command(after_help = "Examples:
  $ cronshard config delete-context staging")]
    DeleteContext {
        /// The context's name.
        name: String,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkAction {
    Pause,
    Resume,
    Delete,
    Trigger,
}

impl BulkAction {
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Pause => "pause",
            BulkAction::Resume => "resume",
            BulkAction::Delete => "delete",
            BulkAction::Trigger => "trigger",
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Executions {
    /// List executions, newest first: of one job, or across jobs; or follow them.
    #[command(after_help = "--status takes a ledger status (pending, running, succeeded, failed, retrying,
skipped, missed, ...); the API names the allowed ones if it is not one. The JOB
column shows the job's key, else its name.

--watch prints the newest page (--limit rows, default 50), oldest first, then
polls it every --interval and prints each row not seen yet or whose status or
attempts changed, until Ctrl-C, --for or --count. -o json prints one execution
per line (JSON Lines), -o yaml one YAML document each. A poll that cannot reach
the API is reported on stderr and tried again.

Examples:
  $ cronshard executions list --job $JOB
  $ cronshard executions list --status failed --from 2026-11-01T00:00:00Z --to 2026-12-01T00:00:00Z
  $ cronshard executions list --status failed --all -o json
  $ cronshard executions list --job $JOB --watch --count 2
  $ cronshard executions list --watch --interval 1s --for 3s -o json")]
    List(ExecutionList),
    /// Explain one slot of a job: did it fire, and if not, why?
    #[command(after_help = "Prints the verdict (the row's status, or why there is no row), a summary and the
timeline of what happened to the slot. Any instant may be asked about.

Examples:
  $ cronshard executions explain $JOB $AT
  $ cronshard executions explain $JOB 2026-12-15T09:00:00.000Z -o json")]
    Explain {
        /// The job: its id, its key, or namespace:key.
        #[arg(value_name = "JOB")]
        job_id: String,
        /// The slot, an RFC 3339 instant.
        scheduled_at: String,
    },
    /// Replay one execution, or in bulk every one a filter selects.
    #[command(after_help = "With JOB and SCHEDULED_AT: that execution, back to pending under a new fire id.
Without them: every execution the filters select (status failed unless --status
says otherwise; at most --limit, default 100). Each gets a fresh retry budget:
the job's own retry policy, with each of --max-retries, --base-delay-ms,
--multiplier and --max-delay-ms given in place of the job's value (the others
stay the job's).

Examples:
  $ cronshard executions replay $JOB $AT
  $ cronshard executions replay $JOB $AT --max-retries 5 --base-delay-ms 2000
  $ cronshard executions replay --status failed --error-contains 503 --from 2026-11-01T00:00:00Z --to 2026-12-01T00:00:00Z
  $ cronshard executions replay --job $JOB --trigger schedule --max-retries 2 --limit 10")]
    Replay(Replay),
    /// Report how the work of an async-completion delivery ended (what its
    /// receiver does after answering 202).
    #[command(after_help = "The execution id and the completion token are the ones the delivery carried
(webhook-id and X-Cronshard-Completion-Token). The token authorises this report
only; no API token is needed. Repeating the same report is safe; a report for an
attempt that no longer awaits one (timed out, replaced, reported otherwise) is
refused and changes nothing.

Examples:
  $ CRONSHARD_COMPLETION_TOKEN=$TOKEN cronshard executions complete $EXECUTION_ID --status succeeded --result \"42 rows\"
  $ cronshard executions complete $EXECUTION_ID --status failed --completion-token $TOKEN")]
    Complete(Completion),
}

/// A completion report.
#[derive(Args, Debug)]
pub struct Completion {
    /// The execution id the delivery carried.
    pub execution_id: String,
    /// How the work ended.
    #[arg(long, value_parser = ["succeeded", "failed"])]
    pub status: String,
    /// A short result or reason kept with the execution (at most 1,024 bytes).
    #[arg(long)]
    pub result: Option<String>,
    /// The attempt's completion token.
    #[arg(long, env = "CRONSHARD_COMPLETION_TOKEN", hide_env_values = true)]
    pub completion_token: String,
}

#[derive(Args, Debug)]
pub struct ExecutionList {
    /// Only this job's executions.
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// Only executions in this status.
    #[arg(long)]
    pub status: Option<String>,
    /// Scheduled at or after this RFC 3339 instant.
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Scheduled before this RFC 3339 instant.
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,
    #[command(flatten)]
    pub paging: Paging,
    /// Follow the executions as they land: print the rows not seen yet, or
    /// whose status changed, until Ctrl-C (or --for, --count).
    #[arg(long, short = 'w', conflicts_with_all = ["cursor", "all"])]
    pub watch: bool,
    /// With --watch: how long to wait between two polls (1s to 5m).
    #[arg(long, value_name = "DURATION", requires = "watch", default_value = "2s", value_parser = interval)]
    pub interval: Duration,
    /// With --watch: stop after this long (`90s`, `15m`, `2h`).
    #[arg(long = "for", value_name = "DURATION", requires = "watch", value_parser = duration)]
    pub for_: Option<Duration>,
    /// With --watch: stop once this many rows have been printed.
    #[arg(long, value_name = "N", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
}

/// A duration as `500ms`, `30s`, `15m`, `2h` (a bare number is seconds).
pub fn duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (number, unit) = raw.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("{raw:?} is not a duration such as 30s, 15m or 2h"))?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("{raw:?}: the unit must be ms, s, m or h")),
    };
    ms.map(Duration::from_millis).ok_or_else(|| format!("{raw:?} is too long"))
}

/// A poll interval: a [`duration`] from 1 s to 5 min, so a watch neither
/// hammers the API nor looks stuck.
fn interval(raw: &str) -> Result<Duration, String> {
    let d = duration(raw)?;
    if (Duration::from_secs(1)..=Duration::from_secs(300)).contains(&d) {
        Ok(d)
    } else {
        Err("must be from 1s to 5m".to_owned())
    }
}

#[derive(Args, Debug)]
pub struct Replay {
    /// The job of the one execution to replay (its id, key, or namespace:key).
    #[arg(requires = "scheduled_at", value_name = "JOB")]
    pub job_id: Option<String>,
    /// The slot of the one execution to replay (RFC 3339).
    pub scheduled_at: Option<String>,
    /// Bulk: executions in this status (failed, pending, retrying, running; default failed).
    #[arg(long, conflicts_with = "job_id")]
    pub status: Option<String>,
    /// Bulk: only this job's executions.
    #[arg(long, value_name = "JOB", conflicts_with = "job_id")]
    pub job: Option<String>,
    /// Bulk: only executions made by this trigger (schedule, manual, ...).
    #[arg(long, conflicts_with = "job_id")]
    pub trigger: Option<String>,
    /// Bulk: only executions whose last error contains this text (case-insensitive).
    #[arg(long, value_name = "TEXT", conflicts_with = "job_id")]
    pub error_contains: Option<String>,
    /// Bulk: scheduled at or after this RFC 3339 instant.
    #[arg(long, value_name = "TIME", conflicts_with = "job_id")]
    pub from: Option<String>,
    /// Bulk: scheduled before this RFC 3339 instant.
    #[arg(long, value_name = "TIME", conflicts_with = "job_id")]
    pub to: Option<String>,
    /// Bulk: replay at most this many (1 to 1000; the API's default is 100).
    #[arg(long, conflicts_with = "job_id")]
    pub limit: Option<u32>,
    /// The replayed executions' retries (instead of each job's).
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// The delay before their first retry, in milliseconds (instead of each job's).
    #[arg(long, value_name = "MS")]
    pub base_delay_ms: Option<u64>,
    /// The factor each further retry's delay grows by (instead of each job's).
    #[arg(long, value_name = "X")]
    pub multiplier: Option<f64>,
    /// The longest delay between retries, in milliseconds (instead of each job's).
    #[arg(long, value_name = "MS")]
    pub max_delay_ms: Option<u64>,
}

impl Replay {
    /// The retry fields given, as the API takes them (`None`: none given,
    /// the jobs' own policies). The API keeps each job's value of a field
    /// not given.
    pub fn retry(&self) -> Option<serde_json::Value> {
        let mut retry = serde_json::Map::new();
        if let Some(n) = self.max_retries {
            retry.insert("max_retries".into(), n.into());
        }
        if let Some(ms) = self.base_delay_ms {
            retry.insert("base_delay_ms".into(), ms.into());
        }
        if let Some(x) = self.multiplier {
            retry.insert("multiplier".into(), x.into());
        }
        if let Some(ms) = self.max_delay_ms {
            retry.insert("max_delay_ms".into(), ms.into());
        }
        (!retry.is_empty()).then_some(serde_json::Value::Object(retry))
    }
}

#[derive(Subcommand, Debug)]
pub enum Calendars {
    /// Create or replace a calendar from a JSON or YAML file.
    #[command(after_help = "The file holds {timezone, dates, ranges, rules, description}.

Examples:
  $ cronshard calendars put holidays -f holidays.yaml")]
    Put {
        /// The calendar's name.
        name: String,
        /// The calendar: a .json or .yaml file, or - for stdin.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
    },
    /// Show a calendar.
    #[command(after_help = "Examples:
  $ cronshard calendars get holidays
  $ cronshard calendars get holidays -o yaml")]
    Get {
        /// The calendar's name.
        name: String,
    },
    /// List calendars.
    #[command(after_help = "Examples:
  $ cronshard calendars list
  $ cronshard calendars list --namespace default --all")]
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Delete a calendar no live job references.
    #[command(after_help = "Examples:
  $ cronshard calendars delete holidays")]
    Delete {
        /// The calendar's name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum SigningKeys {
    /// Make a key that signs from now on, beside the namespace's others.
    #[command(after_help = "The secret (whsec_...) is printed once: give it to the receiver's
Standard Webhooks verifier.

Examples:
  $ cronshard signing-keys create
  $ cronshard signing-keys create -o json | jq -r .secret")]
    Create,
    /// Make a new key; the keys signing now stop after the overlap.
    #[command(after_help = "Both sign during the overlap, so receivers can move to the new secret.

Examples:
  $ cronshard signing-keys rotate
  $ cronshard signing-keys rotate --overlap-seconds 3600")]
    Rotate {
        /// How long the keys signing now go on signing, in seconds (0 to 2592000).
        #[arg(long, default_value_t = 86_400)]
        overlap_seconds: u64,
    },
    /// List the namespace's keys (never their secrets).
    #[command(after_help = "Examples:
  $ cronshard signing-keys list
  $ cronshard signing-keys list -o json")]
    List,
    /// Revoke a key: it stops signing within 10 seconds.
    #[command(after_help = "Examples:
  $ cronshard signing-keys revoke \"$(cronshard signing-keys list -o json | jq -r '.keys[-1].id')\"")]
    Revoke {
        /// The key's id.
        id: String,
    },
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("schedule").required(true).args(["cron", "every_ms", "file"]))]
pub struct Preview {
    /// A cron expression (5 or 6 fields).
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The cron expression's IANA time zone.
    #[arg(long, value_name = "ZONE", requires = "cron", default_value = "UTC")]
    pub tz: String,
    /// An interval in milliseconds (anchored at --from).
    #[arg(long, value_name = "N")]
    pub every_ms: Option<u64>,
    /// A schedule or a preview request in JSON or YAML (- for stdin).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<String>,
    /// How many fire times (1 to 1000; the API's default is 10).
    #[arg(long)]
    pub count: Option<u32>,
    /// Fire times at or after this RFC 3339 instant (default now).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
}

#[derive(Args, Debug)]
pub struct AuditList {
    /// Only this job's entries.
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// Only changes made by this token (its name or id).
    #[arg(long, value_name = "NAME|ID")]
    pub actor: Option<String>,
    /// Only this action (job.pause), or every action on a resource (job).
    #[arg(long)]
    pub action: Option<String>,
    /// Entries at or after this RFC 3339 instant.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Entries before this RFC 3339 instant.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    #[command(flatten)]
    pub paging: Paging,
}

#[derive(Subcommand, Debug)]
pub enum Channels {
    /// Make a channel: an address alert notices are posted to (admin role).
    #[command(after_help = "The address is a secret (a Slack incoming-webhook URL carries its own
credential): give it through CRONSHARD_CHANNEL_URL, or with --webhook-url - on
stdin, rather than as a flag, which shows in the process list. It is never
printed back: the channel shows it as scheme://host/… only.
A webhook channel gets JSON notices signed with the namespace's signing keys; a
slack channel gets Slack messages. --max-per-minute bounds the notices sent to
it (1 to 600; the API's default is 30); more wait their turn.

Examples:
  $ CRONSHARD_CHANNEL_URL=$SLACK_URL cronshard channels create --name ops-slack --kind slack
  $ printf %s \"$HOOK_URL\" | cronshard channels create --name pager-hook --kind webhook --webhook-url - --max-per-minute 60")]
    Create(ChannelCreate),
    /// List the channels (their addresses as scheme://host/… only).
    #[command(after_help = "Examples:
  $ cronshard channels list
  $ cronshard channels list -o json")]
    List,
    /// Delete a channel no alert rule sends to (admin role).
    #[command(after_help = "Examples:
  $ cronshard channels delete $CHANNEL")]
    Delete {
        /// The channel's id.
        id: String,
    },
}

/// A new channel. Its address is a secret: `Debug` does not show it.
#[derive(Args)]
pub struct ChannelCreate {
    /// The channel's name (unique in its namespace).
    #[arg(long)]
    pub name: String,
    /// webhook (signed JSON) or slack (a Slack incoming webhook).
    #[arg(long, value_parser = ["webhook", "slack"])]
    pub kind: String,
    /// The address notices are posted to, or - to read it from stdin.
    /// Prefer the environment variable or stdin: a flag shows in the process list.
    #[arg(long, value_name = "URL|-", env = "CRONSHARD_CHANNEL_URL", hide_env_values = true)]
    pub webhook_url: String,
    /// Most notices sent to it per minute (1 to 600; the API's default is 30).
    #[arg(long, value_name = "N")]
    pub max_per_minute: Option<u32>,
}

impl std::fmt::Debug for ChannelCreate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelCreate")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("webhook_url", &"***")
            .field("max_per_minute", &self.max_per_minute)
            .finish()
    }
}

#[derive(Subcommand, Debug)]
pub enum Alerts {
    /// Create, list, switch on or off and delete alert rules.
    #[command(
        subcommand,
        after_help = "Examples:
  $ cronshard alerts rules create --name sales-failing --job $JOB --condition failed --channel $CHANNEL
  $ cronshard alerts rules list
  $ cronshard alerts rules disable $RULE"
    )]
    Rules(AlertRules),
    /// List incidents, newest first, with the state of each notice sent.
    #[command(after_help = "An incident is a rule's condition holding for one job, from when it opened
until it resolved. Each notice (firing, then resolved) is pending (waiting for
its turn or a retry), delivered, or failed (every attempt spent).

Examples:
  $ cronshard alerts list
  $ cronshard alerts list --open
  $ cronshard alerts list --job $JOB --resolved --limit 10
  $ cronshard alerts list --rule $RULE -o json")]
    List(AlertList),
}

#[derive(Subcommand, Debug)]
pub enum AlertRules {
    /// Make a rule: which jobs it watches, for what, and where it sends.
    #[command(after_help = "The jobs are --job ID (repeatable) or a label --selector. --condition:
  failed                an execution failed (no threshold)
  consecutive_failures  --threshold N executions in a row failed (2 to 1000)
  missed                a slot was missed or skipped (no threshold)
  late                  a slot started more than --threshold ms late (1 to 86400000)
  silent                no success for --threshold ms (1000 to 7776000000, 90 days)
Notices go to each --channel (1 to 10 ids; `channels list` shows them). With
--disabled the rule is made switched off.

Examples:
  $ cronshard alerts rules create --name sales-failing --job $JOB --condition failed --channel $CHANNEL
  $ cronshard alerts rules create --name payments-3-in-a-row --selector team=payments --condition consecutive_failures --threshold 3 --channel $CHANNEL
  $ cronshard alerts rules create --name sales-silent --job $JOB --condition silent --threshold 7200000 --channel $CHANNEL --disabled")]
    Create(RuleCreate),
    /// List the rules.
    #[command(after_help = "Examples:
  $ cronshard alerts rules list
  $ cronshard alerts rules list -o json")]
    List,
    /// Switch a rule on.
    #[command(after_help = "Examples:
  $ cronshard alerts rules enable $RULE")]
    Enable {
        /// The rule's id.
        id: String,
    },
    /// Switch a rule off: it is not evaluated, and opens no incident, until enabled.
    #[command(after_help = "Examples:
  $ cronshard alerts rules disable $RULE")]
    Disable {
        /// The rule's id.
        id: String,
    },
    /// Delete a rule, with its incidents.
    #[command(after_help = "Examples:
  $ cronshard alerts rules delete $RULE")]
    Delete {
        /// The rule's id.
        id: String,
    },
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("watched").required(true).args(["jobs", "selector"]))]
pub struct RuleCreate {
    /// The rule's name (unique in its namespace).
    #[arg(long)]
    pub name: String,
    /// A job the rule watches (repeatable).
    #[arg(long = "job", value_name = "JOB")]
    pub jobs: Vec<String>,
    /// The jobs whose labels match this selector (`k=v`, `k!=v`, `k in (a,b)`, ...).
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// What the rule fires on.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(domain::alert::Condition::ALL.map(domain::alert::Condition::as_str)))]
    pub condition: String,
    /// consecutive_failures: failures in a row; late: milliseconds late;
    /// silent: milliseconds without a success.
    #[arg(long, value_name = "N")]
    pub threshold: Option<i64>,
    /// A channel notices go to (repeatable, 1 to 10).
    #[arg(long = "channel", value_name = "CHANNEL_ID", required = true)]
    pub channels: Vec<String>,
    /// Make the rule switched off.
    #[arg(long)]
    pub disabled: bool,
}

#[derive(Args, Debug)]
pub struct AlertList {
    /// Only incidents still open.
    #[arg(long, conflicts_with = "resolved")]
    pub open: bool,
    /// Only resolved incidents.
    #[arg(long)]
    pub resolved: bool,
    /// Only this job's incidents.
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// Only this rule's incidents.
    #[arg(long, value_name = "RULE_ID")]
    pub rule: Option<String>,
    /// How many (1 to 500; the API's default is 50).
    #[arg(long)]
    pub limit: Option<u32>,
}

/// The whole command tree (for completions and the tests).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_well_formed_and_shows_no_secret_env_value() {
        runtime::config::assert_cli_well_formed(super::command());
    }
}
