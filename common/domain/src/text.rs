//! User text that reaches a person: which characters an identifier may not
//! hold, and how an error quotes a value it refuses.
//!
//! - [`is_hidden`]: control characters (C0, DEL, C1), Unicode format
//!   characters (bidi embeddings, overrides and isolates, zero-width
//!   spaces and joiners, the byte order mark, ...) and the line and
//!   paragraph separators. They render as nothing or move what follows
//!   (after `U+202E`, the right-to-left override, `evil` + RLO + `txt.exe` shows as `evilexe.txt`), so a name holding one can
//!   pass for another, and a raw control character in a terminal is an
//!   escape sequence. No user-named identifier may hold one; a value shown
//!   to a person has them escaped ([`escape`]).
//! - [`quoted`]: an error never echoes a refused value whole: a short prefix,
//!   escaped, so a 200 KB key costs a few dozen bytes of the answer.
//!
//! No dependency: the CLI compiles this file as its own module.

use std::fmt::Write;

/// Characters of a value an error quotes; the rest is cut with `…`.
pub const QUOTE_MAX_CHARS: usize = 40;

/// Whether `c` is invisible or reorders text: a control character (C0, DEL,
/// C1), a Unicode format character (general category Cf: bidi controls
/// U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069; zero-width
/// U+200B–U+200D, U+2060–U+2064, U+FEFF; soft hyphen U+00AD; the tag
/// characters U+E0000–U+E007F, ...) or a line or paragraph separator
/// (U+2028, U+2029).
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{AD}'
                | '\u{600}'..='\u{605}'
                | '\u{61C}'
                | '\u{6DD}'
                | '\u{70F}'
                | '\u{890}'..='\u{891}'
                | '\u{8E2}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0001}'
                | '\u{E0020}'..='\u{E007F}'
        )
}

/// The first hidden character of `s`, if any.
pub fn first_hidden(s: &str) -> Option<char> {
    s.chars().find(|c| is_hidden(*c))
}

/// Why an identifier holding `c` is refused, naming the character
/// (`U+202E`) without printing it.
pub fn hidden_problem(c: char) -> String {
    let what = if c.is_control() {
        "control characters"
    } else {
        "invisible or text-direction characters (bidi controls, zero-width characters, ...)"
    };
    format!("must not contain {what}; found U+{:04X}", u32::from(c))
}

/// `s` with every hidden character written as an escape: `\n`, `\r`, `\t`
/// for those, `\u{1b}` for the others. Backslashes are left alone, so
/// escaping twice changes nothing more.
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if first_hidden(s).is_none() {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    std::borrow::Cow::Owned(out)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if is_hidden(c) => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
        c => out.push(c),
    }
}

/// At most `max` characters of `s`, hidden ones escaped (an escape counts
/// as one), with `…` when cut. Reads no more of `s` than it shows.
pub fn excerpt(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        push_escaped(&mut out, c);
    }
    out
}

/// `"…"`: a refused value as an error quotes it, a short escaped prefix
/// ([`QUOTE_MAX_CHARS`]) in double quotes.
pub fn quoted(s: &str) -> String {
    format!("\"{}\"", excerpt(s, QUOTE_MAX_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_and_zero_width_characters_are_hidden_and_letters_are_not() {
        for c in ['\0', '\n', '\r', '\u{7}', '\u{1b}', '\u{7f}', '\u{85}', '\u{9b}'] {
            assert!(is_hidden(c), "{c:?}");
        }
        for c in ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{200B}', '\u{200F}', '\u{FEFF}', '\u{2028}'] {
            assert!(is_hidden(c), "{c:?}");
        }
        for c in ['a', ' ', 'é', 'ß', '日', 'א', '€', '\u{2030}', '\u{2065}'] {
            assert!(!is_hidden(c), "{c:?}");
        }
        assert_eq!(first_hidden("pay\u{202E}ments"), Some('\u{202E}'));
        assert_eq!(hidden_problem('\u{202E}').rsplit(' ').next(), Some("U+202E"));
        assert!(hidden_problem('\u{1b}').contains("control characters"));
    }

    #[test]
    fn escaping_shows_every_hidden_character_and_is_idempotent() {
        let raw = "a\r\nb\u{1b}[31mc\u{202E}d\u{7}\\e";
        let once = escape(raw);
        assert_eq!(once, "a\\r\\nb\\u{1b}[31mc\\u{202e}d\\u{7}\\e");
        assert!(first_hidden(&once).is_none());
        assert_eq!(escape(&once), once);
        assert!(matches!(escape("plain"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn a_quote_is_short_and_escaped_whatever_the_value() {
        let huge = "k".repeat(200_000);
        let q = quoted(&huge);
        assert_eq!(q.chars().count(), QUOTE_MAX_CHARS + 3, "{q}");
        assert!(q.ends_with("…\""));
        assert_eq!(quoted("ok"), "\"ok\"");
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
        assert_eq!(excerpt("abc", 3), "abc");
        assert_eq!(excerpt("abcd", 3), "abc…");
    }
}
