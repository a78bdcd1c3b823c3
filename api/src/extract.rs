//! Extractors whose rejections use our problem+json shape.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde_json::Value;
use uuid::Uuid;

use crate::error::{ApiError, MERGE_PATCH};

/// A JSON body: any syntax error, duplicate object key, content type other
/// than JSON or oversize body becomes a clear 4xx.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(content_type) = req.headers().get(axum::http::header::CONTENT_TYPE) {
            media_type_problem(content_type.as_bytes(), &["application/json"])
                .map_or(Ok(()), |p| Err(ApiError::BadRequest(p)))?;
        }
        read_json(req, state).await.map(JsonBody)
    }
}

/// A JSON Merge Patch body (`PATCH`): `application/merge-patch+json`, or
/// `application/json`, read as a merge patch too (clients that know only
/// JSON send that); another media type is a 415. Otherwise read as
/// [`JsonBody`] is.
pub struct MergePatchBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for MergePatchBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(content_type) = req.headers().get(axum::http::header::CONTENT_TYPE) {
            media_type_problem(content_type.as_bytes(), &[MERGE_PATCH, "application/json"])
                .map_or(Ok(()), |p| Err(ApiError::UnsupportedMediaType(p)))?;
        }
        read_json(req, state).await.map(MergePatchBody)
    }
}

/// The body as one JSON document: any syntax error, duplicate object key or
/// oversize body is a clear 4xx.
/// A JSON body that may be left out: an empty body is `None` (for
/// operations whose options are all optional, such as a replay).
pub struct OptionalJsonBody(pub Option<Value>);

impl<S: Send + Sync> FromRequest<S> for OptionalJsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req.headers().get(axum::http::header::CONTENT_TYPE).cloned();
        let bytes = read_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(None));
        }
        if let Some(content_type) = content_type {
            media_type_problem(content_type.as_bytes(), &["application/json"])
                .map_or(Ok(()), |p| Err(ApiError::BadRequest(p)))?;
        }
        parse_json(&bytes).map(|v| OptionalJsonBody(Some(v)))
    }
}

async fn read_json<S: Send + Sync>(req: Request, state: &S) -> Result<Value, ApiError> {
    parse_json(&read_bytes(req, state).await?)
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    let value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("the request body is not valid JSON: {e}")))?;
    check_unique_keys(bytes)?;
    Ok(value)
}

async fn read_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let limit = crate::body_limit_of(req.uri().path());
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(format!("the request body exceeds {limit} bytes"))
        } else {
            ApiError::BadRequest(format!("could not read the request body: {e}"))
        }
    })
}

/// What is wrong with a `Content-Type` that should be one of `accepted`
/// (JSON types): the type and subtype in any case, with parameters or
/// without (`; charset=utf-8`); a charset other than UTF-8 is refused (JSON
/// is UTF-8, RFC 8259 §8.1). For [`JsonBody`], anything else
/// (`application/jsonx`, or `application/merge-patch+json`, whose meaning is
/// not a full document) is a 400 as it has always been.
fn media_type_problem(raw: &[u8], accepted: &[&str]) -> Option<String> {
    let refused = || {
        format!(
            "Content-Type must be {}, got {:?}",
            accepted.join(" or "),
            String::from_utf8_lossy(raw).chars().take(100).collect::<String>()
        )
    };
    let Ok(value) = std::str::from_utf8(raw) else { return Some(refused()) };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim_matches([' ', '\t']);
    if !accepted.iter().any(|a| essence.eq_ignore_ascii_case(a)) {
        return Some(refused());
    }
    for parameter in parts {
        let parameter = parameter.trim_matches([' ', '\t']);
        if parameter.is_empty() {
            continue;
        }
        let Some((name, value)) = parameter.split_once('=') else {
            return Some(refused());
        };
        let value = value.trim_matches('"');
        if name.trim_end().eq_ignore_ascii_case("charset") && !value.eq_ignore_ascii_case("utf-8") {
            return Some(format!(
                "Content-Type: the charset of a JSON body must be utf-8, got {:?}",
                value.chars().take(40).collect::<String>()
            ));
        }
    }
    None
}

/// serde_json keeps the last of two equal keys without a word, so
/// `{"url": "a", "url": "b"}` would be read as whatever the last says while a
/// proxy or a log reader sees the first. A second pass over the (valid)
/// document refuses any object with a key twice, naming the key and where.
fn check_unique_keys(bytes: &[u8]) -> Result<(), ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde::de::DeserializeSeed::deserialize(UniqueKeys { path: "" }, &mut de)
        .map_err(|e| ApiError::BadRequest(format!("the request body has an object with a repeated key: {e}")))
}

/// Visits a document without keeping it; `path` is where it is (`""` for
/// the top, then `target.headers`, `items[2]`).
struct UniqueKeys<'p> {
    path: &'p str,
}

impl UniqueKeys<'_> {
    fn child(&self, name: &str) -> String {
        if self.path.is_empty() { name.to_owned() } else { format!("{}.{name}", self.path) }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let path = format!("{}[{i}]", self.path);
            if seq.next_element_seed(UniqueKeys { path: &path })?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = self.child(&key);
            if seen.contains(&key) {
                let within = if self.path.is_empty() { String::new() } else { format!(" in {}", self.path) };
                return Err(serde::de::Error::custom(format_args!("duplicate key {key:?}{within}")));
            }
            map.next_value_seed(UniqueKeys { path: &path })?;
            seen.insert(key);
        }
        Ok(())
    }
}

/// A job path segment (an id, a key or `namespace:key`), resolved to the
/// job's id among the caller's namespaces.
pub struct JobIdPath(pub Uuid);

impl FromRequestParts<crate::AppState> for JobIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &crate::AppState) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(raw): axum::extract::Path<String> =
            axum::extract::Path::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::BadRequest(format!("invalid path: {}", e.body_text())))?;
        let caller = parts.extensions.get::<crate::caller::Caller>().cloned().ok_or(ApiError::Unauthorized)?;
        crate::job_ref::resolve(state, &caller, &raw).await.map(JobIdPath)
    }
}

/// Query parameters: a malformed query string is a problem+json 400.
pub struct QueryParams<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|e| ApiError::BadRequest(format!("invalid query string: {}", e.body_text())))
    }
}

/// Path parameters: a segment that does not decode (e.g. invalid UTF-8) is a
/// problem+json 400 rather than axum's plain-text rejection.
pub struct PathParams<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|e| ApiError::BadRequest(format!("invalid path: {}", e.body_text())))
    }
}
