//! What a client sends RabbitMQ, read from the bytes: the declarations
//! (`exchange.declare`, `queue.declare`, `queue.bind`) and the publishes
//! (`basic.publish` with its content header and body), and AMQP values as
//! typed JSON. Read from the wire rather than from cronshard's types, so that
//! a release's own code is what the corpus records, whatever its API.
//!
//! A typed value is `{"<type>": value}` with RabbitMQ's field type letters
//! (`I` a 32-bit int, `l` a 64-bit int, `S` a long string, `t` a boolean,
//! `F` a table, `A` an array, ...): a header sent as another type is another
//! header to a reader that matches on the type.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString};
use serde_json::{Map, Value, json};

/// One recorded call, as JSON (`method` names it).
pub type Call = Value;

/// A publish waiting for its content header and body: the call so far, the
/// body's size, and the body so far.
type OpenPublish = (Map<String, Value>, u64, Vec<u8>);

/// The calls in one connection's client-to-server bytes, in order. A
/// truncated tail (the connection was cut mid-frame) is left out.
pub fn calls(stream: &[u8]) -> Vec<Call> {
    let mut calls = Vec::new();
    let Some(mut rest) = stream.strip_prefix(b"AMQP\x00\x00\x09\x01") else { return calls };
    // A publish waiting for its header and body, per channel.
    let mut open: std::collections::HashMap<u16, OpenPublish> = Default::default();
    while rest.len() >= 7 {
        let kind = rest[0];
        let channel = u16::from_be_bytes([rest[1], rest[2]]);
        let size = u32::from_be_bytes([rest[3], rest[4], rest[5], rest[6]]) as usize;
        if rest.len() < 7 + size + 1 {
            break;
        }
        let payload = &rest[7..7 + size];
        rest = &rest[7 + size + 1..];
        match kind {
            1 => {
                if let Some((publish, call)) = method(payload) {
                    if publish {
                        open.insert(channel, (call, 0, Vec::new()));
                    } else {
                        calls.push(Value::Object(call));
                    }
                }
            }
            2 => {
                let empty = match open.get_mut(&channel) {
                    Some((call, size, _)) => {
                        let mut r = Reader(payload);
                        let (_class, _weight) = (r.u16(), r.u16());
                        *size = r.u64().unwrap_or(0);
                        call.insert("properties".into(), properties(&mut r).unwrap_or(Value::Null));
                        *size == 0
                    }
                    None => false,
                };
                if empty && let Some((call, _, body)) = open.remove(&channel) {
                    calls.push(published(call, body));
                }
            }
            3 => {
                let complete = match open.get_mut(&channel) {
                    Some((_, size, body)) => {
                        body.extend_from_slice(payload);
                        body.len() as u64 >= *size
                    }
                    None => false,
                };
                if complete && let Some((call, _, body)) = open.remove(&channel) {
                    calls.push(published(call, body));
                }
            }
            _ => {}
        }
    }
    calls
}

fn published(mut call: Map<String, Value>, body: Vec<u8>) -> Call {
    call.insert("body".into(), Value::String(String::from_utf8_lossy(&body).into_owned()));
    Value::Object(call)
}

/// A method frame cronshard's topology or publisher sends: `(is a publish, call)`.
fn method(payload: &[u8]) -> Option<(bool, Map<String, Value>)> {
    let mut r = Reader(payload);
    let (class, id) = (r.u16()?, r.u16()?);
    let mut call = Map::new();
    let bits = |call: &mut Map<String, Value>, byte: u8, names: &[&str]| {
        for (i, name) in names.iter().enumerate() {
            call.insert((*name).into(), Value::Bool(byte & (1 << i) != 0));
        }
    };
    match (class, id) {
        (40, 10) => {
            r.u16()?;
            call.insert("method".into(), "exchange.declare".into());
            call.insert("exchange".into(), r.short_string()?.into());
            call.insert("type".into(), r.short_string()?.into());
            bits(&mut call, r.u8()?, &["passive", "durable", "auto_delete", "internal", "nowait"]);
            call.insert("arguments".into(), table(&mut r)?);
        }
        (50, 10) => {
            r.u16()?;
            call.insert("method".into(), "queue.declare".into());
            call.insert("queue".into(), r.short_string()?.into());
            bits(&mut call, r.u8()?, &["passive", "durable", "exclusive", "auto_delete", "nowait"]);
            call.insert("arguments".into(), table(&mut r)?);
        }
        (50, 20) => {
            r.u16()?;
            call.insert("method".into(), "queue.bind".into());
            call.insert("queue".into(), r.short_string()?.into());
            call.insert("exchange".into(), r.short_string()?.into());
            call.insert("routing_key".into(), r.short_string()?.into());
            bits(&mut call, r.u8()?, &["nowait"]);
            call.insert("arguments".into(), table(&mut r)?);
        }
        (60, 40) => {
            r.u16()?;
            call.insert("method".into(), "basic.publish".into());
            call.insert("exchange".into(), r.short_string()?.into());
            call.insert("routing_key".into(), r.short_string()?.into());
            bits(&mut call, r.u8()?, &["mandatory", "immediate"]);
            return Some((true, call));
        }
        _ => return None,
    }
    Some((false, call))
}

/// The property names in the order of their flag bits (15 down).
const PROPERTIES: [&str; 14] = [
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
];

fn properties(r: &mut Reader) -> Option<Value> {
    let flags = r.u16()?;
    let mut props = Map::new();
    for (i, name) in PROPERTIES.iter().enumerate() {
        if flags & (1 << (15 - i)) == 0 {
            continue;
        }
        let value = match *name {
            "headers" => table(r)?,
            "delivery_mode" | "priority" => r.u8()?.into(),
            "timestamp" => r.u64()?.into(),
            _ => r.short_string()?.into(),
        };
        props.insert((*name).into(), value);
    }
    Some(Value::Object(props))
}

fn table(r: &mut Reader) -> Option<Value> {
    let len = r.u32()? as usize;
    let mut inner = Reader(r.take(len)?);
    let mut fields = Map::new();
    while !inner.0.is_empty() {
        let name = inner.short_string()?;
        fields.insert(name, typed(&mut inner)?);
    }
    Some(Value::Object(fields))
}

fn typed(r: &mut Reader) -> Option<Value> {
    let tag = r.u8()? as char;
    let value = match tag {
        't' => Value::Bool(r.u8()? != 0),
        'b' => (r.u8()? as i8).into(),
        'B' => r.u8()?.into(),
        's' => (r.u16()? as i16).into(),
        'u' => r.u16()?.into(),
        'I' => (r.u32()? as i32).into(),
        'i' => r.u32()?.into(),
        'l' | 'L' => (r.u64()? as i64).into(),
        'f' => f32::from_bits(r.u32()?).into(),
        'd' => f64::from_bits(r.u64()?).into(),
        'D' => json!([r.u8()?, r.u32()?]),
        'S' => {
            let len = r.u32()? as usize;
            String::from_utf8_lossy(r.take(len)?).into_owned().into()
        }
        'x' => {
            let len = r.u32()? as usize;
            hex(r.take(len)?).into()
        }
        'A' => {
            let len = r.u32()? as usize;
            let mut inner = Reader(r.take(len)?);
            let mut items = Vec::new();
            while !inner.0.is_empty() {
                items.push(typed(&mut inner)?);
            }
            Value::Array(items)
        }
        'T' => r.u64()?.into(),
        'F' => {
            // `table` reads its own length.
            table(r)?
        }
        'V' => Value::Null,
        _ => return None,
    };
    Some(json!({ tag.to_string(): value }))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn short_string(&mut self) -> Option<String> {
        let len = self.u8()? as usize;
        Some(String::from_utf8_lossy(self.take(len)?).into_owned())
    }
}

/// A lapin value as typed JSON, with the letter it goes on the wire as.
pub fn value_json(value: &AMQPValue) -> Value {
    let (tag, v) = match value {
        AMQPValue::Boolean(b) => ('t', Value::Bool(*b)),
        AMQPValue::ShortShortInt(n) => ('b', (*n).into()),
        AMQPValue::ShortShortUInt(n) => ('B', (*n).into()),
        AMQPValue::ShortInt(n) => ('s', (*n).into()),
        AMQPValue::ShortUInt(n) => ('u', (*n).into()),
        AMQPValue::LongInt(n) => ('I', (*n).into()),
        AMQPValue::LongUInt(n) => ('i', (*n).into()),
        AMQPValue::LongLongInt(n) => ('l', (*n).into()),
        AMQPValue::Float(n) => ('f', (*n).into()),
        AMQPValue::Double(n) => ('d', (*n).into()),
        AMQPValue::DecimalValue(d) => ('D', json!([d.scale, d.value])),
        AMQPValue::ShortString(s) => ('S', s.as_str().into()),
        AMQPValue::LongString(s) => ('S', String::from_utf8_lossy(s.as_bytes()).into_owned().into()),
        AMQPValue::FieldArray(a) => ('A', Value::Array(a.as_slice().iter().map(value_json).collect())),
        AMQPValue::Timestamp(t) => ('T', (*t).into()),
        AMQPValue::FieldTable(t) => ('F', table_json(t)),
        AMQPValue::ByteArray(b) => ('x', hex(b.as_slice()).into()),
        AMQPValue::Void => ('V', Value::Null),
    };
    json!({ tag.to_string(): v })
}

pub fn table_json(table: &FieldTable) -> Value {
    Value::Object(table.inner().iter().map(|(k, v)| (k.as_str().to_owned(), value_json(v))).collect())
}

/// The typed JSON of [`value_json`] back as a lapin value.
pub fn value_of(json: &Value) -> anyhow::Result<AMQPValue> {
    let (tag, v) = json
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
        .ok_or_else(|| anyhow::anyhow!("not a typed AMQP value: {json}"))?;
    let int = || v.as_i64().ok_or_else(|| anyhow::anyhow!("{tag}: not an integer: {v}"));
    Ok(match tag.as_str() {
        "t" => AMQPValue::Boolean(v.as_bool().unwrap_or(false)),
        "b" => AMQPValue::ShortShortInt(int()? as i8),
        "B" => AMQPValue::ShortShortUInt(int()? as u8),
        "s" => AMQPValue::ShortInt(int()? as i16),
        "u" => AMQPValue::ShortUInt(int()? as u16),
        "I" => AMQPValue::LongInt(int()? as i32),
        "i" => AMQPValue::LongUInt(int()? as u32),
        "l" | "L" => AMQPValue::LongLongInt(int()?),
        "f" => AMQPValue::Float(v.as_f64().unwrap_or(0.0) as f32),
        "d" => AMQPValue::Double(v.as_f64().unwrap_or(0.0)),
        "D" => AMQPValue::DecimalValue(DecimalValue {
            scale: v[0].as_u64().unwrap_or(0) as u8,
            value: v[1].as_u64().unwrap_or(0) as u32,
        }),
        "S" => AMQPValue::LongString(LongString::from(v.as_str().unwrap_or_default())),
        "A" => {
            let items: Vec<AMQPValue> =
                v.as_array().map(|a| a.iter().map(value_of).collect()).transpose()?.unwrap_or_default();
            AMQPValue::FieldArray(FieldArray::from(items))
        }
        "T" => AMQPValue::Timestamp(int()? as u64),
        "F" => AMQPValue::FieldTable(table_of(v)?),
        "x" => {
            let text = v.as_str().unwrap_or_default();
            let bytes = (0..text.len() / 2)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()?;
            AMQPValue::ByteArray(ByteArray::from(bytes))
        }
        "V" => AMQPValue::Void,
        other => anyhow::bail!("unknown AMQP field type {other:?}"),
    })
}

pub fn table_of(json: &Value) -> anyhow::Result<FieldTable> {
    let mut table = FieldTable::default();
    for (k, v) in json.as_object().ok_or_else(|| anyhow::anyhow!("not a table: {json}"))? {
        table.insert(ShortString::from(k.as_str()), value_of(v)?);
    }
    Ok(table)
}

/// A message's properties as JSON: only those set, headers typed.
pub fn properties_json(p: &BasicProperties) -> Value {
    let mut out = Map::new();
    let mut text = |name: &str, v: &Option<ShortString>| {
        if let Some(v) = v {
            out.insert(name.into(), v.as_str().into());
        }
    };
    text("content_type", p.content_type());
    text("content_encoding", p.content_encoding());
    text("correlation_id", p.correlation_id());
    text("reply_to", p.reply_to());
    text("expiration", p.expiration());
    text("message_id", p.message_id());
    text("type", p.kind());
    text("user_id", p.user_id());
    text("app_id", p.app_id());
    text("cluster_id", p.cluster_id());
    if let Some(h) = p.headers() {
        out.insert("headers".into(), table_json(h));
    }
    if let Some(m) = p.delivery_mode() {
        out.insert("delivery_mode".into(), (*m).into());
    }
    if let Some(m) = p.priority() {
        out.insert("priority".into(), (*m).into());
    }
    if let Some(t) = p.timestamp() {
        out.insert("timestamp".into(), (*t).into());
    }
    Value::Object(out)
}

/// [`properties_json`] back as lapin's properties, as a consumer receives them.
pub fn properties_of(json: &Value) -> anyhow::Result<BasicProperties> {
    let mut p = BasicProperties::default();
    let text = |name: &str| json.get(name).and_then(Value::as_str).map(ShortString::from);
    if let Some(v) = text("content_type") {
        p = p.with_content_type(v);
    }
    if let Some(v) = text("content_encoding") {
        p = p.with_content_encoding(v);
    }
    if let Some(v) = text("correlation_id") {
        p = p.with_correlation_id(v);
    }
    if let Some(v) = text("reply_to") {
        p = p.with_reply_to(v);
    }
    if let Some(v) = text("expiration") {
        p = p.with_expiration(v);
    }
    if let Some(v) = text("message_id") {
        p = p.with_message_id(v);
    }
    if let Some(v) = text("type") {
        p = p.with_type(v);
    }
    if let Some(v) = text("user_id") {
        p = p.with_user_id(v);
    }
    if let Some(v) = text("app_id") {
        p = p.with_app_id(v);
    }
    if let Some(v) = text("cluster_id") {
        p = p.with_cluster_id(v);
    }
    if let Some(h) = json.get("headers") {
        p = p.with_headers(table_of(h)?);
    }
    if let Some(m) = json.get("delivery_mode").and_then(Value::as_u64) {
        p = p.with_delivery_mode(m as u8);
    }
    if let Some(m) = json.get("priority").and_then(Value::as_u64) {
        p = p.with_priority(m as u8);
    }
    if let Some(t) = json.get("timestamp").and_then(Value::as_u64) {
        p = p.with_timestamp(t);
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_values_round_trip() {
        let mut t = FieldTable::default();
        t.insert("a".into(), AMQPValue::LongInt(3));
        t.insert("b".into(), AMQPValue::LongLongInt(-4));
        t.insert("c".into(), AMQPValue::LongString("x".into()));
        t.insert("d".into(), AMQPValue::Boolean(true));
        let json = table_json(&t);
        assert_eq!(json, json!({"a": {"I": 3}, "b": {"l": -4}, "c": {"S": "x"}, "d": {"t": true}}));
        assert_eq!(table_json(&table_of(&json).unwrap()), json);
    }
}
