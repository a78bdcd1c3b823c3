//! Completion tokens of asynchronous completion: the worker sends one with
//! each attempt of a job whose completion is `async`
//! (`X-Cronshard-Completion-Token`), and the receiver that answered 202
//! reports the outcome with it (`POST /v1/executions/{id}/complete`). A
//! token names its attempt and is an HMAC of the execution id and attempt
//! under a key derived from the operator's key-encryption key, so the API
//! checks it without a table of tokens, and one attempt's token cannot
//! report another attempt or execution.
//!
//! Form: `cct1.{kek id}.{attempt}.{base64url HMAC}`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::secrets::{Keyring, SecretError};

const PURPOSE: &str = "cronshard-completion-token:v1";
const PREFIX: &str = "cct1";

fn message(execution_id: &str, attempt: u32) -> String {
    format!("{execution_id}\n{attempt}")
}

/// The token of attempt `attempt` of `execution_id`.
pub fn token(keyring: &Keyring, execution_id: &str, attempt: u32) -> Result<String, SecretError> {
    let (kek_id, key) = keyring.derived_mac_key(PURPOSE)?;
    let mac = ring::hmac::sign(&key, message(execution_id, attempt).as_bytes());
    Ok(format!("{PREFIX}.{kek_id}.{attempt}.{}", URL_SAFE_NO_PAD.encode(mac.as_ref())))
}

/// The attempt a token of `execution_id` reports, when it is genuine.
pub fn verify(keyring: &Keyring, execution_id: &str, token: &str) -> Option<u32> {
    let mut parts = token.trim().split('.');
    let (prefix, kek_id, attempt, mac) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if prefix != PREFIX || parts.next().is_some() {
        return None;
    }
    let attempt: u32 = attempt.parse().ok().filter(|n| *n >= 1)?;
    let mac = URL_SAFE_NO_PAD.decode(mac).ok()?;
    let key = keyring.derived_mac_key_of(kek_id, PURPOSE)?;
    ring::hmac::verify(&key, message(execution_id, attempt).as_bytes(), &mac).ok()?;
    Some(attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyring(text: &str) -> Keyring {
        Keyring::parse(text).unwrap()
    }

    #[test]
    fn a_token_reports_its_own_attempt_of_its_own_execution_only() {
        let ring = keyring("k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
        let t = token(&ring, "job@2026-12-07T08:00:00.000Z", 2).unwrap();
        assert_eq!(verify(&ring, "job@2026-12-07T08:00:00.000Z", &t), Some(2));
        assert_eq!(verify(&ring, "job@2026-12-07T08:00:01.000Z", &t), None, "another execution");
        let forged = t.replacen(".2.", ".3.", 1);
        assert_eq!(verify(&ring, "job@2026-12-07T08:00:00.000Z", &forged), None, "another attempt");
        for bad in ["", "cct1", "cct1.k1.2", "cct2.k1.2.x", "cct1.k9.2.AAAA", &format!("{t}.x")] {
            assert_eq!(verify(&ring, "job@2026-12-07T08:00:00.000Z", bad), None, "{bad}");
        }
        let other = keyring("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=");
        assert_eq!(verify(&other, "job@2026-12-07T08:00:00.000Z", &t), None, "another key under the same id");
    }

    #[test]
    fn a_token_made_before_a_key_rotation_still_verifies() {
        let old = keyring("k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
        let t = token(&old, "e", 1).unwrap();
        let rotated =
            keyring("k2:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=,k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
        assert_eq!(verify(&rotated, "e", &t), Some(1));
        assert!(token(&rotated, "e", 1).unwrap().starts_with("cct1.k2.1."));
        assert!(matches!(token(&Keyring::default(), "e", 1), Err(SecretError::NoKek)));
    }
}
