//! Why a command failed, and the exit code that tells a script which kind
//! of failure it was (listed in `--help` and docs/cli.md).

use std::fmt;

/// The process's exit code. Each failure maps to exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    /// Anything the other codes do not cover (an answer the CLI cannot
    /// read, stdout closed with an error).
    Other = 1,
    /// Bad usage or invalid input: clap's errors, unreadable files, and
    /// the API's 400, 413, 415 and 422.
    Invalid = 2,
    /// 404: no such job, execution or calendar; or no such context.
    NotFound = 3,
    /// 409 or 412: a conflict with the stored state or a stale `If-Match`.
    Conflict = 4,
    /// A 5xx, or the API could not be reached at all.
    Unavailable = 5,
    /// 401 or 403: no or a wrong token, or a role too low.
    Denied = 6,
    /// Not a failure: `cronshard diff` found something the documents would
    /// change (like `diff` and `kubectl diff`, which exit 1, but 1 is taken).
    Differs = 7,
}

impl Exit {
    /// The exit code of an API error status.
    pub fn of_status(status: u16) -> Exit {
        match status {
            401 | 403 => Exit::Denied,
            404 => Exit::NotFound,
            409 | 412 => Exit::Conflict,
            400..=499 => Exit::Invalid,
            500..=599 => Exit::Unavailable,
            _ => Exit::Other,
        }
    }
}

/// A failed command: what to print on stderr and how to exit.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    /// One line each, printed under the message (the field errors of a 422
    /// as `field: message`).
    pub details: Vec<String>,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Failure { exit, message: message.into(), details: Vec::new() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Failure::new(Exit::Invalid, message)
    }

    pub fn other(message: impl Into<String>) -> Self {
        Failure::new(Exit::Other, message)
    }
}

/// What stderr shows: each line with the secrets of any URL in it masked
/// and no character printed raw that a terminal would act on (an API
/// error's text is data, like a table cell).
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let safe = |s: &str| crate::text::escape(&crate::redact::text(s)).into_owned();
        write!(f, "error: {}", safe(&self.message))?;
        for line in &self.details {
            write!(f, "\n  {}", safe(line))?;
        }
        Ok(())
    }
}

pub type Result<T, E = Failure> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::{Exit, Failure};

    #[test]
    fn a_failure_prints_no_control_character_and_no_url_secret() {
        let mut f = Failure::invalid("bad \u{1b}]0;owned\u{7} at http://h/?api_key=s3cr3t");
        f.details.push("name: x\r\nforged: line\u{202e}".to_owned());
        let shown = f.to_string();
        assert_eq!(
            shown,
            "error: bad \\u{1b}]0;owned\\u{7} at http://h/?api_key=***\n  name: x\\r\\nforged: line\\u{202e}"
        );
    }

    #[test]
    fn statuses_map_to_their_exit_codes() {
        let cases = [
            (400, 2),
            (413, 2),
            (415, 2),
            (422, 2),
            (404, 3),
            (409, 4),
            (412, 4),
            (500, 5),
            (503, 5),
            (401, 6),
            (403, 6),
            (302, 1),
        ];
        for (status, code) in cases {
            assert_eq!(Exit::of_status(status) as i32, code, "{status}");
        }
    }
}
