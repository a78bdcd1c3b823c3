//! `cronshard config ...`: the contexts of the config file (`crate::config`).
//! No API is asked. A token goes in through stdin only, and comes out
//! nowhere: listings say whether a context has one.

use std::io::{IsTerminal, Read};

use clap::ArgMatches;
use clap::parser::ValueSource;
use serde_json::{Value, json};

use crate::args::{Config, Global};
use crate::config::{self, Context, File};
use crate::failure::{Exit, Failure, Result};
use crate::output::{self, Format, text};

/// The global flags `set-context` stores are the ones typed on its command
/// line: an environment variable set for other commands is not stored.
pub fn run(global: &Global, matches: &ArgMatches, command: Config) -> Result<String> {
    let typed = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    let format = global.output.unwrap_or(Format::Table);
    let path = config::path()?;
    let mut file = File::load(&path)?;
    let done = |message: String| if format == Format::Table { format!("{message}\n") } else { String::new() };
    match command {
        Config::SetContext { name, token_stdin } => {
            if typed("token") {
                return Err(Failure::invalid(
                    "a context's token is read from stdin: pipe it in with --token-stdin (a --token flag \
                     shows in the shell's history and the process list)",
                ));
            }
            check_name(&name)?;
            let url = global.url.clone().filter(|_| typed("url"));
            let is_new = !file.contexts.contains_key(&name);
            let mut context = match (file.contexts.get(&name), url) {
                (Some(existing), url) => {
                    Context { url: url.unwrap_or_else(|| existing.url.clone()), ..existing.clone() }
                }
                (None, Some(url)) => Context { url, ..Context::default() },
                (None, None) => {
                    return Err(Failure::invalid(format!("context {name:?} is new: give its --url")));
                }
            };
            crate::client::base_url(&context.url)
                .map_err(|_| Failure::invalid("--url must be an http or https URL with a host"))?;
            if typed("namespace") {
                context.namespace = global.namespace.clone().filter(|n| !n.is_empty());
            }
            if let Some(output) = global.output.filter(|_| typed("output")) {
                context.output = Some(format_name(output).to_owned());
            }
            if token_stdin {
                context.token = Some(read_token()?);
            }
            file.contexts.insert(name.clone(), context);
            if file.current_context.is_none() {
                file.current_context = Some(name.clone());
            }
            file.save(&path)?;
            let current = if file.current_context.as_deref() == Some(&name) { " (current)" } else { "" };
            let verb = if is_new { "made" } else { "changed" };
            Ok(done(format!("context {name} {verb}{current} in {}", path.display())))
        }
        Config::UseContext { name } => {
            file.context(&name, &path)?;
            file.current_context = Some(name.clone());
            file.save(&path)?;
            Ok(done(format!("current context: {name}")))
        }
        Config::GetContexts => {
            let contexts: Vec<Value> = file
                .contexts
                .iter()
                .map(|(name, c)| {
                    json!({
                        "name": name,
                        "current": file.current_context.as_deref() == Some(name.as_str()),
                        "url": crate::redact::url(&c.url),
                        "namespace": c.namespace,
                        "output": c.output,
                        "has_token": c.token.is_some(),
                    })
                })
                .collect();
            let shown = json!({ "current_context": file.current_context, "contexts": contexts });
            output::render(format, &shown.to_string(), &shown, |_| contexts_table(&contexts))
        }
        Config::CurrentContext => match &file.current_context {
            Some(name) => {
                let shown = json!({ "current_context": name });
                output::render(format, &shown.to_string(), &shown, |_| name.clone())
            }
            None => Err(Failure::new(
                Exit::NotFound,
                format!("{} names no current context (`cronshard config use-context NAME`)", path.display()),
            )),
        },
        Config::DeleteContext { name } => {
            if file.contexts.remove(&name).is_none() {
                return Err(config::no_context(&name, &path));
            }
            if file.current_context.as_deref() == Some(&name) {
                file.current_context = None;
            }
            file.save(&path)?;
            Ok(done(format!("context {name} deleted")))
        }
    }
}

/// A context's name: what `--context` can be given as, one line of
/// visible characters.
fn check_name(name: &str) -> Result<()> {
    let fine = !name.is_empty()
        && name.chars().count() <= 100
        && name.chars().all(|c| c.is_alphanumeric() || "-_.@:/".contains(c));
    if fine {
        Ok(())
    } else {
        Err(Failure::invalid(
            "a context's name is 1 to 100 letters, digits and - _ . @ : / (e.g. prod, team-a@staging)",
        ))
    }
}

/// The token piped in: one line, surrounding whitespace dropped. A terminal
/// would show it as it is typed, so stdin must not be one.
fn read_token() -> Result<String> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(Failure::invalid(
            "--token-stdin reads the token from a pipe or a file, e.g. `printf %s \"$TOKEN\" | cronshard config \
             set-context NAME --token-stdin`; a terminal would show it",
        ));
    }
    let mut token = String::new();
    stdin.read_to_string(&mut token).map_err(|e| Failure::invalid(format!("cannot read stdin: {e}")))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(Failure::invalid("--token-stdin: stdin holds no token"));
    }
    if token.contains(['\n', '\r']) || token.chars().any(char::is_control) {
        return Err(Failure::invalid("--token-stdin: the token must be one line of visible characters"));
    }
    Ok(token.to_owned())
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Table => "table",
        Format::Json => "json",
        Format::Yaml => "yaml",
    }
}

fn contexts_table(contexts: &[Value]) -> String {
    let rows: Vec<Vec<String>> = contexts
        .iter()
        .map(|c| {
            vec![
                if c["current"] == true { "*".to_owned() } else { String::new() },
                text(&c["name"]),
                text(&c["url"]),
                text(&c["namespace"]),
                text(&c["output"]),
                if c["has_token"] == true { "yes".to_owned() } else { "no".to_owned() },
            ]
        })
        .collect();
    output::table(&["CURRENT", "NAME", "URL", "NAMESPACE", "OUTPUT", "TOKEN"], &rows)
}
