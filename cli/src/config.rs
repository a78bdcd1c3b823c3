//! Contexts: named sets of settings (the API's URL, a namespace, an output
//! format, a token) kept in a config file, and the one rule that decides
//! where each setting of a command comes from: its flag, else its
//! environment variable (clap reads both), else the context in use, else
//! the default.
//!
//! The file may hold tokens: it is written with mode 0600, by a rename so a
//! reader never sees half of it, and no message, listing or `Debug` shows a
//! token. A context's token is sent only to the context's own URL, so a
//! `--url` pointing elsewhere never receives it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use serde_json::{Map, Value, json};

use crate::args::Global;
use crate::failure::{Exit, Failure, Result};
use crate::output::Format;

/// Where the API is when nothing says otherwise (the local stack's).
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The config file:
///
/// ```yaml
/// current_context: prod
/// contexts:
///   prod: {url: https://cronshard.example.com, namespace: payments, output: table, token: cst_...}
/// ```
#[derive(Default)]
pub struct File {
    pub current_context: Option<String>,
    pub contexts: BTreeMap<String, Context>,
}

/// One context. Its `Debug` does not show the token.
#[derive(Clone, Default)]
pub struct Context {
    pub url: String,
    pub namespace: Option<String>,
    /// `table`, `json` or `yaml`; checked when used, so a file edited by
    /// hand is refused naming the context.
    pub output: Option<String>,
    pub token: Option<String>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("url", &crate::redact::url(&self.url))
            .field("namespace", &self.namespace)
            .field("output", &self.output)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// The config file's path: `$CRONSHARD_CONFIG`, else
/// `$XDG_CONFIG_HOME/cronshard/config.yaml` (an absolute one, as the XDG
/// specification says), else `~/.config/cronshard/config.yaml`.
pub fn path() -> Result<PathBuf> {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(path) = set("CRONSHARD_CONFIG") {
        return Ok(path);
    }
    let base = match set("XDG_CONFIG_HOME").filter(|p| p.is_absolute()) {
        Some(dir) => dir,
        None => set("HOME")
            .ok_or_else(|| Failure::invalid("cannot find the config file: set CRONSHARD_CONFIG or HOME"))?
            .join(".config"),
    };
    Ok(base.join("cronshard").join("config.yaml"))
}

impl File {
    /// The file at `path`; an empty one when it does not exist.
    pub fn load(path: &Path) -> Result<File> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(File::default()),
            Err(e) => return Err(Failure::invalid(format!("cannot read the config file {}: {e}", path.display()))),
        };
        if text.trim().is_empty() {
            return Ok(File::default());
        }
        let invalid = |why: String| Failure::invalid(format!("the config file {} is not valid: {why}", path.display()));
        let value = yaml_serde::from_str::<Value>(&text).map_err(|e| invalid(unquoted(&e.to_string())))?;
        File::from_value(value).map_err(invalid)
    }

    /// The file's document, every field checked (a misspelt one is refused,
    /// not ignored). No message quotes a value: it may be a token.
    fn from_value(value: Value) -> Result<File, String> {
        let Value::Object(mut top) = value else { return Err("it must be a mapping".to_owned()) };
        let current_context = optional_string(&mut top, "current_context", "")?;
        let contexts = match top.remove("contexts") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(contexts)) => contexts,
            Some(_) => return Err("contexts must be a mapping of names to contexts".to_owned()),
        };
        if let Some(unknown) = top.keys().next() {
            return Err(format!("unknown field {unknown:?} (current_context, contexts)"));
        }
        let mut file = File { current_context, contexts: BTreeMap::new() };
        for (name, context) in contexts {
            let at = format!("contexts.{name}.");
            let Value::Object(mut fields) = context else { return Err(format!("contexts.{name} must be a mapping")) };
            let url = optional_string(&mut fields, "url", &at)?.ok_or_else(|| format!("{at}url is missing"))?;
            let context = Context {
                url,
                namespace: optional_string(&mut fields, "namespace", &at)?,
                output: optional_string(&mut fields, "output", &at)?,
                token: optional_string(&mut fields, "token", &at)?,
            };
            if let Some(unknown) = fields.keys().next() {
                return Err(format!("unknown field {at}{unknown} (url, namespace, output, token)"));
            }
            file.contexts.insert(name, context);
        }
        Ok(file)
    }

    fn to_value(&self) -> Value {
        let contexts: Map<String, Value> = self
            .contexts
            .iter()
            .map(|(name, c)| {
                let mut fields = Map::new();
                fields.insert("url".into(), json!(c.url));
                for (key, value) in [("namespace", &c.namespace), ("output", &c.output), ("token", &c.token)] {
                    if let Some(value) = value {
                        fields.insert(key.into(), json!(value));
                    }
                }
                (name.clone(), Value::Object(fields))
            })
            .collect();
        let mut top = Map::new();
        if let Some(current) = &self.current_context {
            top.insert("current_context".into(), json!(current));
        }
        top.insert("contexts".into(), Value::Object(contexts));
        Value::Object(top)
    }

    /// Writes the file with mode 0600 (its directory made 0700 if missing):
    /// a new file beside it, then a rename over it.
    pub fn save(&self, path: &Path) -> Result<()> {
        let failed =
            |e: std::io::Error| Failure::other(format!("cannot write the config file {}: {e}", path.display()));
        let text =
            yaml_serde::to_string(&self.to_value()).map_err(|e| Failure::other(format!("cannot write YAML: {e}")))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(dir).map_err(failed)?;
        }
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push(format!(".{}.tmp", std::process::id()));
        let temporary = path.with_file_name(name);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = options.open(&temporary).and_then(|mut f| {
            use std::io::Write;
            f.write_all(text.as_bytes())?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&temporary, path)) {
            let _ = std::fs::remove_file(&temporary);
            return Err(failed(e));
        }
        Ok(())
    }

    /// The context named `name`, or exit code 3 naming the file.
    pub fn context(&self, name: &str, path: &Path) -> Result<&Context> {
        self.contexts.get(name).ok_or_else(|| no_context(name, path))
    }
}

pub fn no_context(name: &str, path: &Path) -> Failure {
    Failure::new(
        Exit::NotFound,
        format!("no context {name:?} in {} (`cronshard config get-contexts` lists them)", path.display()),
    )
}

/// What a command runs with, each setting from its first source.
pub struct Settings {
    pub url: String,
    pub token: Option<String>,
    pub format: Format,
    pub namespace: Option<String>,
}

/// Flag or environment variable (clap has merged them; empty is unset),
/// else the context (`--context`, else the file's current one), else the
/// default. The file is read only when a setting is left to it.
pub fn settings(global: &Global) -> Result<Settings> {
    let given = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let (url, token, namespace) = (given(&global.url), given(&global.token), given(&global.namespace));
    let named = given(&global.context);
    let complete = url.is_some() && token.is_some() && namespace.is_some() && global.output.is_some();
    let (context, path) = if complete && named.is_none() {
        (None, None)
    } else {
        let path = path()?;
        let file = File::load(&path)?;
        let context = match named.or(file.current_context.clone()) {
            Some(name) => Some((name.clone(), file.context(&name, &path)?.clone())),
            None => None,
        };
        (context, Some(path))
    };
    let Some((name, context)) = context else {
        return Ok(Settings {
            url: url.unwrap_or_else(|| DEFAULT_URL.to_owned()),
            token,
            format: global.output.unwrap_or(Format::Table),
            namespace,
        });
    };
    let path = path.expect("a context comes from a file");
    let format = match (global.output, &context.output) {
        (Some(format), _) => format,
        (None, Some(output)) => Format::from_str(output, true).map_err(|_| {
            Failure::invalid(format!(
                "context {name:?} in {}: output must be table, json or yaml, not {output:?}",
                path.display()
            ))
        })?,
        (None, None) => Format::Table,
    };
    let url = url.unwrap_or_else(|| context.url.clone());
    // The context's token belongs to the context's API: a URL given by a
    // flag or the environment for another API does not get it.
    let token = token.or_else(|| context.token.clone().filter(|_| same_url(&url, &context.url)));
    Ok(Settings { url, token, format, namespace: namespace.or(context.namespace.clone()).filter(|n| !n.is_empty()) })
}

/// The text of `key` in `map`, taken out of it; absent and null are `None`.
fn optional_string(map: &mut Map<String, Value>, key: &str, at: &str) -> Result<Option<String>, String> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{at}{key} must be text")),
    }
}

/// A parser's message with each value it quotes (`...`) masked: the value
/// may be a token (`invalid type: integer `12345``).
fn unquoted(message: &str) -> String {
    message.split('`').enumerate().map(|(i, part)| if i % 2 == 1 { "`…`" } else { part }).collect()
}

/// The same API base URL, a trailing slash aside.
fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<File, String> {
        File::from_value(yaml_serde::from_str(text).map_err(|e| unquoted(&e.to_string()))?)
    }

    #[test]
    fn a_context_reads_and_writes_as_yaml_and_its_debug_hides_the_token() {
        let text = "current_context: prod\ncontexts:\n  prod:\n    url: https://c.example.com\n    namespace: payments\n    token: s3cr3t\n  local:\n    url: http://127.0.0.1:8080\n";
        let file = parsed(text).unwrap();
        assert_eq!(file.current_context.as_deref(), Some("prod"));
        assert_eq!(file.contexts["prod"].token.as_deref(), Some("s3cr3t"));
        assert_eq!(file.contexts["local"].namespace, None);
        assert!(!format!("{:?}", file.contexts["prod"]).contains("s3cr3t"));
        let again = File::from_value(file.to_value()).unwrap();
        assert_eq!(again.contexts.len(), 2);
        assert_eq!(again.contexts["prod"].token.as_deref(), Some("s3cr3t"));
        let typo = parsed("contexts:\n  x:\n    url: u\n    tokne: t\n").err().unwrap();
        assert_eq!(typo, "unknown field contexts.x.tokne (url, namespace, output, token)");
        assert_eq!(parsed("contexts:\n  x:\n    namespace: n\n").err().unwrap(), "contexts.x.url is missing");
        let err = parsed("contexts:\n  x:\n    url: u\n    token: 123456\n").err().unwrap();
        assert_eq!(err, "contexts.x.token must be text");
        let err = parsed("contexts:\n  x:\n    url: u\n    token: [s3cr3t\n").err().unwrap();
        assert!(!err.contains("s3cr3t"), "{err}");
        assert_eq!(
            unquoted("invalid type: integer `123456`, expected a string"),
            "invalid type: integer `…`, expected a string"
        );
    }

    #[test]
    fn urls_match_up_to_a_trailing_slash() {
        assert!(same_url("https://c.example.com/", "https://c.example.com"));
        assert!(!same_url("https://c.example.com", "https://evil.example.com"));
    }
}
