//! [`ServerReply`]: what a command or a script answers, as RESP2 carries it.

use std::fmt::Write as _;

/// A reply as a Redis server sends it over RESP2 (the protocol the lock nodes speak).
///
/// [`to_value`](Self::to_value) turns it into the [`redis::Value`] the redis crate would
/// parse from the same bytes, so a simulated node can hand its replies to the code that
/// reads a real node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerReply {
    /// A nil bulk string: a missing key, a `SET NX` that did not set, a Lua `false`.
    Nil,
    /// An integer.
    Integer(i64),
    /// A bulk string (binary-safe).
    Bulk(Vec<u8>),
    /// An array of replies.
    Array(Vec<ServerReply>),
    /// A status line, such as `OK`.
    Status(String),
    /// An error line: its code first (`ERR`, `WRONGTYPE`, `NOSCRIPT`, ...), then the message.
    Error(String),
}

impl ServerReply {
    /// The `OK` status.
    pub fn ok() -> Self {
        ServerReply::Status("OK".to_owned())
    }

    /// An error reply with Redis's generic `ERR` code.
    pub(crate) fn err(message: impl std::fmt::Display) -> Self {
        ServerReply::Error(format!("ERR {message}"))
    }

    /// The error Redis answers for a value of the wrong type under a key.
    pub(crate) fn wrong_type() -> Self {
        ServerReply::Error(
            "WRONGTYPE Operation against a key holding the wrong kind of value".to_owned(),
        )
    }

    /// A bulk string of `text`.
    pub(crate) fn bulk(text: impl Into<Vec<u8>>) -> Self {
        ServerReply::Bulk(text.into())
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, ServerReply::Error(_))
    }

    /// The code of an error reply (its first word), `None` for any other reply.
    pub fn error_code(&self) -> Option<&str> {
        match self {
            ServerReply::Error(line) => line.split(' ').next(),
            _ => None,
        }
    }

    /// The reply encoded as RESP2, as the server writes it on the connection. Line breaks in
    /// a status or an error become spaces, as Redis writes them.
    pub fn to_resp(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_resp(&mut out);
        out
    }

    fn write_resp(&self, out: &mut Vec<u8>) {
        let mut line = |prefix: char, text: &str| {
            let mut header = String::new();
            let _ = write!(header, "{prefix}{}\r\n", text.replace(['\r', '\n'], " "));
            out.extend_from_slice(header.as_bytes());
        };
        match self {
            ServerReply::Nil => line('$', "-1"),
            ServerReply::Integer(value) => line(':', &value.to_string()),
            ServerReply::Status(text) => line('+', text),
            ServerReply::Error(text) => line('-', text),
            ServerReply::Bulk(bytes) => {
                line('$', &bytes.len().to_string());
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            ServerReply::Array(items) => {
                line('*', &items.len().to_string());
                for item in items {
                    item.write_resp(out);
                }
            }
        }
    }

    /// The reply as the redis crate parses it from [`to_resp`](Self::to_resp): `OK` becomes
    /// [`redis::Value::Okay`], an error [`redis::Value::ServerError`] with its kind.
    pub fn to_value(&self) -> redis::Value {
        // Built directly where the parse is plain (a simulation reads millions of replies);
        // an error, whose kind the redis crate reads from its code, goes through the parser.
        match self {
            ServerReply::Nil => redis::Value::Nil,
            ServerReply::Integer(value) => redis::Value::Int(*value),
            ServerReply::Bulk(bytes) => redis::Value::BulkString(bytes.clone()),
            ServerReply::Array(items) => {
                redis::Value::Array(items.iter().map(ServerReply::to_value).collect())
            }
            ServerReply::Status(text) if text == "OK" => redis::Value::Okay,
            ServerReply::Status(text) if !text.contains(['\r', '\n']) => {
                redis::Value::SimpleString(text.clone())
            }
            _ => redis::parse_redis_value(&self.to_resp())
                .expect("the RESP2 encoding of a reply parses back"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_back_as_the_redis_crate_reads_a_server() {
        let reply = ServerReply::Array(vec![
            ServerReply::ok(),
            ServerReply::Integer(-7),
            ServerReply::Nil,
            ServerReply::bulk("a\r\nb"),
            ServerReply::Status("QUEUED".to_owned()),
        ]);
        assert_eq!(
            reply.to_value(),
            redis::Value::Array(vec![
                redis::Value::Okay,
                redis::Value::Int(-7),
                redis::Value::Nil,
                redis::Value::BulkString(b"a\r\nb".to_vec()),
                redis::Value::SimpleString("QUEUED".to_owned()),
            ])
        );
        for reply in [ServerReply::Status("a\nb".into()), ServerReply::bulk("")] {
            assert_eq!(
                reply.to_value(),
                redis::parse_redis_value(&reply.to_resp()).unwrap()
            );
        }
        let missing = ServerReply::Error("NOSCRIPT No matching script. Please use EVAL.".into());
        let redis::Value::ServerError(error) = missing.to_value() else {
            panic!("an error reply parses as a server error");
        };
        assert_eq!(error.kind(), Some(redis::ServerErrorKind::NoScript));
        assert_eq!(missing.error_code(), Some("NOSCRIPT"));
        assert_eq!(
            ServerReply::Error("ERR a\nb".into()).to_resp(),
            b"-ERR a b\r\n".to_vec()
        );
    }
}
