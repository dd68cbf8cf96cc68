//! The server's log: human lines by default, JSON lines on request (`--log-format json`).
//!
//! # What it implements
//! Every log event goes to stderr (journald under systemd); `RUST_LOG` filters (default
//! `info`). In the text format (the default) an event is one human line, as `tracing`'s
//! formatter writes it (colour only on a terminal). In the JSON format an event is one JSON
//! object per line, for a log shipper or `jq`:
//!
//! ```text
//! {"event":"conn_close","level":"info","open_ms":412,"peer":"127.0.0.1:51634","protocol":"nbd","reason":"tenant_removed","target":"server::worker","tenant":"bob","ts":"YYYY-MM-DDTHH:MM:SS.ffffffZ","message":"connection closed","worker":1}
//! ```
//!
//! `ts` (RFC 3339, UTC), `level`, `target`, `event` and `message` are in every line; the
//! event's own fields follow under their names, numbers as numbers. The events an operator
//! builds on (docs/server.md, *Logs*): `conn_open` (peer, protocol, worker), `conn_close`
//! (peer, protocol, tenant, reason, open_ms, worker), `refusal` (peer, reason: a connection,
//! a HELLO, an NBD export, a TLS-PSK handshake or an admin request turned away), `reload`
//! (trigger, outcome, generation, changes or error) and `stop`. Events without an `event`
//! field are `"event":"log"`.
//!
//! # Design
//! A `tracing_subscriber` event formatter ([`JsonLines`]) that collects the fields into a
//! `serde_json` map and writes it with `serde_json`, so quoting and escaping are serde's; the
//! timestamp is `tracing_subscriber`'s own RFC 3339 clock. Keys are sorted (serde_json's map),
//! one line per event, no span context (the server's events carry what they need).
//!
//! # What it leaves out
//! Log rotation and shipping (journald's, or the supervisor's).

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// How log events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("log format {other:?}: expected `text` or `json`")),
        }
    }
}

fn env_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
}

/// Logs to stderr in `format`; `RUST_LOG` filters (default `info`). Colour codes only in the
/// text format and when stderr is a terminal: a log file or a pipe into journald or fail2ban
/// gets plain text. Safe to call twice (the first call wins).
pub fn init(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::util::SubscriberInitExt;
    // An error means a subscriber is installed already: the first call wins.
    match format {
        LogFormat::Text => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(env_filter())
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .try_init();
        }
        LogFormat::Json => {
            let _ = json_subscriber(std::io::stderr, env_filter()).try_init();
        }
    }
}

/// A subscriber writing JSON lines to `writer`, filtered by `filter` (tests capture with it).
pub fn json_subscriber<W>(
    writer: W,
    filter: tracing_subscriber::EnvFilter,
) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(writer)
        .event_format(JsonLines)
        .finish()
}

/// The JSON-lines event formatter (see the module essay).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let line = json_line(event)?;
        writeln!(writer, "{line}")
    }
}

/// One event as a JSON object.
fn json_line(event: &Event<'_>) -> Result<String, fmt::Error> {
    let meta = event.metadata();
    let mut ts = String::new();
    SystemTime.format_time(&mut Writer::new(&mut ts))?;
    let mut fields = JsonFields::default();
    event.record(&mut fields);
    let mut map = fields.0;
    let name = match map.remove("event") {
        Some(serde_json::Value::String(name)) => name,
        Some(other) => other.to_string(),
        None => "log".to_string(),
    };
    map.insert("event".into(), name.into());
    map.insert("ts".into(), ts.into());
    map.insert(
        "level".into(),
        meta.level().as_str().to_ascii_lowercase().into(),
    );
    map.insert("target".into(), meta.target().into());
    serde_json::to_string(&serde_json::Value::Object(map)).map_err(|_| fmt::Error)
}

/// An event's fields as JSON values.
#[derive(Default)]
struct JsonFields(serde_json::Map<String, serde_json::Value>);

impl JsonFields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        self.0.insert(field.name().to_string(), value);
    }
}

impl Visit for JsonFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%x` fields arrive here too, formatted with their Display.
        self.put(field, format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_event_is_one_json_object_with_its_fields() {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let subscriber = json_subscriber(
            move || out.clone(),
            tracing_subscriber::EnvFilter::new("info"),
        );
        let peer: std::net::SocketAddr = "127.0.0.1:9".parse().expect("addr");
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(event = "conn_open", peer = %peer, worker = 1u64, "connection \"opened\"");
            tracing::warn!(ok = true, "no event name");
            tracing::debug!("filtered out");
        });
        let text = String::from_utf8(buffer.0.lock().expect("lock").clone()).expect("utf-8");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["event"], "conn_open");
        assert_eq!(lines[0]["peer"], "127.0.0.1:9");
        assert_eq!(lines[0]["worker"], 1);
        assert_eq!(lines[0]["message"], "connection \"opened\"");
        assert_eq!(lines[0]["level"], "info");
        assert!(
            lines[0]["ts"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{text}"
        );
        assert_eq!(
            (lines[1]["event"].as_str(), lines[1]["ok"].as_bool()),
            (Some("log"), Some(true))
        );
    }
}
