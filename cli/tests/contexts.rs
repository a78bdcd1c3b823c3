//! Contexts of the config file: made, listed, switched and deleted by
//! `cronshard config`, used by every other command with the precedence
//! flag > environment variable > context > default, the file kept at mode
//! 0600, and the token never printed, never stored from a flag or the
//! environment, and never sent to another URL than its context's.

#[path = "../../api/tests/support/lib.rs"]
mod app;
#[path = "support/lib.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::{Cli, Run, Stack, TOKEN, TempDir, example};

/// The CLI with no URL or token in its environment, reading `config`.
fn with_config(config: &Path) -> Cli {
    Cli::new().env("CRONSHARD_CONFIG", &config.to_string_lossy())
}

fn no_token(run: &Run, token: &str) {
    assert!(!run.stdout.contains(token) && !run.stderr.contains(token), "the token was printed: {run:?}");
}

/// A one-shot HTTP server answering 401 that keeps the request's head, to
/// see which headers a command sent.
async fn recorder() -> (String, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let answer = "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        socket.write_all(answer.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&head).to_lowercase()
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contexts_are_made_used_switched_and_deleted_and_the_token_never_shows() {
    let stack = Stack::start("cli-contexts").await;
    let dir = TempDir::new("contexts");
    let config = dir.0.join("nested/cronshard.yaml");
    let cli = || with_config(&config);

    // No file yet: no contexts, no current one (exit 3).
    let run = cli().args(["config", "get-contexts"]).ok().await;
    assert_eq!(run.stdout, "CURRENT  NAME  URL  NAMESPACE  OUTPUT  TOKEN\n");
    cli().args(["config", "current-context"]).fails(3).await;

    // A context with its token from stdin: the first becomes current; the
    // file (and its new directory) readable by its owner only.
    let run = cli()
        .args(["config", "set-context", "local", "--url", &stack.base(), "--namespace", "default", "--token-stdin"])
        .stdin(format!("{TOKEN}\n"))
        .ok()
        .await;
    assert_eq!(run.stdout, format!("context local made (current) in {}\n", config.display()));
    no_token(&run, TOKEN);
    assert_eq!(std::fs::metadata(&config).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(config.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    assert!(std::fs::read_to_string(&config).unwrap().contains(TOKEN), "stored");
    let run = cli().args(["config", "current-context"]).ok().await;
    assert_eq!(run.stdout, "local\n");

    // Used by every command: URL, token and namespace from the context.
    let run = cli().args(["-o", "json", "jobs", "create", "-f", &example("job.json")]).ok().await;
    assert_eq!(run.json()["namespace"], "default");
    cli().args(["jobs", "list"]).ok().await;

    // Listed without the token (whether there is one, only).
    let run = cli().args(["config", "get-contexts"]).ok().await;
    no_token(&run, TOKEN);
    assert_eq!(run.lines()[1], format!("*        local  {}  default    -       yes", stack.base()));
    let run = cli().args(["-o", "json", "config", "get-contexts"]).ok().await;
    no_token(&run, TOKEN);
    assert_eq!(
        run.json(),
        json!({"current_context": "local", "contexts": [{"name": "local", "current": true, "url": stack.base(),
               "namespace": "default", "output": null, "has_token": true}]})
    );

    // A second context, no token; --context picks it for one command.
    let run = cli().args(["config", "set-context", "down", "--url", "http://127.0.0.1:1", "-o", "json"]).ok().await;
    assert_eq!(run.stdout, "", "-o json: the setting stored, nothing printed");
    let run = cli().args(["--context", "down", "jobs", "list"]).fails(5).await;
    assert!(run.stderr.contains("http://127.0.0.1:1"), "{run:?}");
    cli().env("CRONSHARD_CONTEXT", "down").args(["jobs", "list"]).fails(5).await;
    cli().args(["--context", "nope", "jobs", "list"]).fails(3).await;

    // Precedence: flag > environment > context > default.
    cli().args(["config", "use-context", "down"]).ok().await;
    assert_eq!(cli().args(["config", "current-context"]).ok().await.stdout, "down\n");
    let run = cli().env("CRONSHARD_TOKEN", TOKEN).env("CRONSHARD_URL", &stack.base()).args(["jobs", "list"]).ok().await;
    assert!(run.json()["items"].is_array(), "the context's output (json): {run:?}");
    let run = cli()
        .env("CRONSHARD_TOKEN", TOKEN)
        .env("CRONSHARD_URL", "http://127.0.0.1:1")
        .args(["--url", &stack.base(), "-o", "table", "jobs", "list"])
        .ok()
        .await;
    assert!(run.stdout.starts_with("ID "), "the flags win: {run:?}");
    cli().env("CRONSHARD_TOKEN", TOKEN).args(["jobs", "list"]).fails(5).await;

    // The context's token goes to the context's URL only.
    let (url, seen) = recorder().await;
    cli().args(["--context", "local", "--url", &url, "jobs", "list"]).fails(6).await;
    let head = seen.await.unwrap();
    assert!(head.starts_with("get /v1/jobs") && !head.contains("authorization"), "{head}");
    let (url, seen) = recorder().await;
    cli()
        .env("CRONSHARD_TOKEN", "from-the-environment")
        .args(["--context", "local", "--url", &url, "jobs", "list"])
        .fails(6)
        .await;
    assert!(seen.await.unwrap().contains("authorization: bearer from-the-environment"));

    // A wrong token in a context: refused, never printed.
    let run = cli()
        .args(["config", "set-context", "wrong", "--url", &stack.base(), "--token-stdin"])
        .stdin("cst_wrong_0c9d\n".into())
        .ok()
        .await;
    assert_eq!(run.stdout, format!("context wrong made in {}\n", config.display()), "not current: one is");
    let run = cli().args(["--context", "wrong", "jobs", "list"]).fails(6).await;
    no_token(&run, "cst_wrong_0c9d");
    let run = cli().args(["--context", "wrong", "-o", "yaml", "config", "get-contexts"]).ok().await;
    no_token(&run, "cst_wrong_0c9d");

    // Changing a context keeps what is not given (the token too).
    stack.namespace("team-c").await;
    cli().args(["config", "set-context", "local", "--namespace", "team-c"]).ok().await;
    let run = cli().args(["--context", "local", "-o", "json", "jobs", "create", "-f", &example("job.json")]).ok().await;
    assert_eq!(run.json()["namespace"], "team-c", "{run:?}");

    // Deleting the current context leaves none current.
    let run = cli().args(["config", "delete-context", "down"]).ok().await;
    assert_eq!(run.stdout, "context down deleted\n");
    cli().args(["config", "current-context"]).fails(3).await;
    cli().args(["config", "delete-context", "down"]).fails(3).await;
    cli().args(["config", "use-context", "down"]).fails(3).await;
    no_token(&cli().args(["config", "get-contexts"]).ok().await, TOKEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_only_stored_from_stdin_and_the_environment_is_not_stored() {
    let dir = TempDir::new("contexts-refusals");
    let config = dir.0.join("config.yaml");
    let cli = || with_config(&config);

    let run = cli()
        .args(["--token", "cst_flag_71aa", "config", "set-context", "a", "--url", "https://c.example.com"])
        .fails(2)
        .await;
    assert!(run.stderr.contains("--token-stdin"), "{run:?}");
    no_token(&run, "cst_flag_71aa");
    assert!(!config.exists(), "nothing written");
    cli().args(["config", "set-context", "a"]).fails(2).await; // a new context needs --url
    cli().args(["config", "set-context", "a", "--url", "localhost:8080"]).fails(2).await;
    cli().args(["config", "set-context", "a b", "--url", "https://c.example.com"]).fails(2).await;
    cli()
        .args(["config", "set-context", "a", "--url", "https://c.example.com", "--token-stdin"])
        .stdin(" \n".into())
        .fails(2)
        .await;
    assert!(!config.exists(), "nothing written");

    // Variables set for other commands are not stored in the context.
    cli()
        .env("CRONSHARD_TOKEN", "cst_env_3f0e")
        .env("CRONSHARD_NAMESPACE", "from-env")
        .env("CRONSHARD_OUTPUT", "yaml")
        .args(["config", "set-context", "a", "--url", "https://c.example.com"])
        .ok()
        .await;
    let stored = std::fs::read_to_string(&config).unwrap();
    assert!(!stored.contains("cst_env_3f0e") && !stored.contains("from-env") && !stored.contains("yaml"), "{stored}");
    let run = cli().args(["-o", "json", "config", "get-contexts"]).ok().await;
    assert_eq!(run.json()["contexts"][0]["has_token"], false);

    // A broken file: exit 2 naming it, no value quoted.
    std::fs::write(&config, "contexts:\n  a:\n    url: https://c.example.com\n    token: 424242\n").unwrap();
    let run = cli().args(["jobs", "list"]).fails(2).await;
    assert!(run.stderr.contains(&config.display().to_string()) && run.stderr.contains("contexts.a.token"), "{run:?}");
    no_token(&run, "424242");
    std::fs::write(&config, "current_context: a\ncontexts:\n  a:\n    url: https://c.example.com\n    output: xml\n")
        .unwrap();
    let run = cli().args(["jobs", "list"]).fails(2).await;
    assert!(run.stderr.contains("output must be table, json or yaml"), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_is_found_by_cronshard_config_then_xdg_config_home_then_home() {
    let dir = TempDir::new("contexts-paths");
    let set = |cli: Cli| cli.args(["config", "set-context", "x", "--url", "https://c.example.com"]);
    let made = |path: PathBuf| {
        assert!(path.exists(), "{} not made", path.display());
    };
    let xdg = dir.0.join("xdg");
    let home = dir.0.join("home");
    let run = set(Cli::new()
        .env("CRONSHARD_CONFIG", "")
        .env("XDG_CONFIG_HOME", &xdg.to_string_lossy())
        .env("HOME", &home.to_string_lossy()))
    .ok()
    .await;
    assert!(run.stdout.contains(&xdg.join("cronshard/config.yaml").display().to_string()), "{run:?}");
    made(xdg.join("cronshard/config.yaml"));
    // A relative XDG_CONFIG_HOME is ignored, as the XDG specification says.
    set(Cli::new().env("CRONSHARD_CONFIG", "").env("XDG_CONFIG_HOME", "relative").env("HOME", &home.to_string_lossy()))
        .ok()
        .await;
    made(home.join(".config/cronshard/config.yaml"));
    let own = dir.0.join("own.yaml");
    set(Cli::new().env("CRONSHARD_CONFIG", &own.to_string_lossy()).env("HOME", &home.to_string_lossy())).ok().await;
    made(own);
}
