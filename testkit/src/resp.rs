//! A minimal blocking RESP2 client: encode one command, send it, parse one reply.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Longest reply header line accepted (type byte, payload and `\r\n`).
const MAX_LINE: u64 = 64 * 1024;
/// Deepest array nesting accepted, so a hostile reply cannot exhaust the stack.
const MAX_DEPTH: usize = 32;
/// Largest bulk string accepted; Redis' own limit is 512 MiB.
const MAX_BULK: usize = 512 * 1024 * 1024;
/// Array elements preallocated at most, whatever length the header claims.
const MAX_PREALLOC: usize = 1024;

/// One RESP2 reply, as parsed from the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespValue {
    /// A simple string such as `+OK` or `+PONG` (without the `+`).
    Simple(String),
    /// An error reply such as `-ERR unknown command` (without the `-`).
    ///
    /// Only ever found nested inside an [`RespValue::Array`]: a top-level
    /// error reply is turned into `Err` by `RedisServer::command`.
    Error(String),
    /// An integer reply (`:42`).
    Integer(i64),
    /// A non-null bulk string, kept as raw bytes because RESP is binary safe.
    Bulk(Vec<u8>),
    /// A non-null array, whose elements may themselves be arrays.
    Array(Vec<RespValue>),
    /// A null bulk string (`$-1`) or null array (`*-1`), e.g. `GET` of a missing key.
    Nil,
}

impl RespValue {
    /// The text of a simple string, or of a bulk string holding valid UTF-8;
    /// `None` for every other variant.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            RespValue::Simple(text) => Some(text),
            RespValue::Bulk(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// The value of an integer reply; `None` for every other variant.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            RespValue::Integer(value) => Some(*value),
            _ => None,
        }
    }
}

/// Timeouts for one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Bound on establishing the TCP connection.
    pub(crate) connect: Duration,
    /// Bound on each read and each write.
    pub(crate) io: Duration,
}

/// Sends `args` as one command on a fresh connection to `addr` and returns the
/// parsed reply. A top-level error reply becomes `Err`.
pub(crate) fn request(
    addr: SocketAddr,
    args: &[&str],
    timeouts: Timeouts,
) -> Result<RespValue, String> {
    let name = args.first().ok_or("empty command")?;
    let stream = connect(addr, timeouts)?;
    (&stream)
        .write_all(&encode(args))
        .map_err(|e| format!("sending {name} to {addr}: {e}"))?;
    match read_value(&mut BufReader::new(stream), 0) {
        Ok(RespValue::Error(message)) => Err(format!("{name} on {addr}: error reply: {message}")),
        Ok(value) => Ok(value),
        Err(e) => Err(format!("reading reply to {name} from {addr}: {e}")),
    }
}

/// Opens a TCP connection with read and write timeouts set.
fn connect(addr: SocketAddr, timeouts: Timeouts) -> Result<TcpStream, String> {
    let stream = TcpStream::connect_timeout(&addr, timeouts.connect)
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeouts.io))
        .and_then(|()| stream.set_write_timeout(Some(timeouts.io)))
        .map_err(|e| format!("setting timeouts on {addr}: {e}"))?;
    Ok(stream)
}

/// Encodes a command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Parses one RESP2 value; `depth` is the current array nesting level.
pub(crate) fn read_value(reader: &mut impl BufRead, depth: usize) -> Result<RespValue, String> {
    if depth > MAX_DEPTH {
        return Err(format!("reply nested deeper than {MAX_DEPTH} arrays"));
    }
    let line = read_line(reader)?;
    let (&kind, payload) = line.split_first().ok_or("empty reply line")?;
    match kind {
        b'+' => Ok(RespValue::Simple(text(payload)?)),
        b'-' => Ok(RespValue::Error(text(payload)?)),
        b':' => Ok(RespValue::Integer(integer(payload)?)),
        b'$' => read_bulk(reader, integer(payload)?),
        b'*' => read_array(reader, integer(payload)?, depth),
        other => Err(format!("unknown RESP type byte {:?}", char::from(other))),
    }
}

/// Reads one `\r\n`-terminated line and returns it without the terminator.
fn read_line(reader: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    reader
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .map_err(|e| e.to_string())?;
    if line.is_empty() {
        return Err("connection closed before a reply arrived".to_owned());
    }
    if !line.ends_with(b"\r\n") {
        return Err("reply line truncated or longer than 64 KiB".to_owned());
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

/// Reads the body of a bulk string whose header announced `len` bytes.
fn read_bulk(reader: &mut impl BufRead, len: i64) -> Result<RespValue, String> {
    if len == -1 {
        return Ok(RespValue::Nil);
    }
    let len = usize::try_from(len)
        .ok()
        .filter(|&len| len <= MAX_BULK)
        .ok_or_else(|| format!("invalid bulk string length {len}"))?;
    let mut body = vec![0; len + 2];
    reader.read_exact(&mut body).map_err(|e| e.to_string())?;
    if !body.ends_with(b"\r\n") {
        return Err("bulk string not terminated by CRLF".to_owned());
    }
    body.truncate(len);
    Ok(RespValue::Bulk(body))
}

/// Reads the `len` elements of an array found at nesting level `depth`.
fn read_array(reader: &mut impl BufRead, len: i64, depth: usize) -> Result<RespValue, String> {
    if len == -1 {
        return Ok(RespValue::Nil);
    }
    let len = usize::try_from(len).map_err(|_| format!("invalid array length {len}"))?;
    let mut items = Vec::with_capacity(len.min(MAX_PREALLOC));
    for _ in 0..len {
        items.push(read_value(reader, depth + 1)?);
    }
    Ok(RespValue::Array(items))
}

/// Decodes a line payload as UTF-8 text.
fn text(payload: &[u8]) -> Result<String, String> {
    String::from_utf8(payload.to_vec()).map_err(|_| "reply line is not UTF-8".to_owned())
}

/// Decodes a line payload as a decimal integer.
fn integer(payload: &[u8]) -> Result<i64, String> {
    let digits = std::str::from_utf8(payload).map_err(|_| "integer is not UTF-8".to_owned())?;
    digits
        .parse()
        .map_err(|_| format!("invalid integer {digits:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(wire: &[u8]) -> Result<RespValue, String> {
        read_value(&mut &wire[..], 0)
    }

    #[test]
    fn encodes_ping_exactly() {
        assert_eq!(encode(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
    }

    #[test]
    fn encodes_empty_argument() {
        assert_eq!(encode(&["SET", ""]), b"*2\r\n$3\r\nSET\r\n$0\r\n\r\n");
    }

    #[test]
    fn parses_scalars() {
        assert_eq!(parse(b"+PONG\r\n"), Ok(RespValue::Simple("PONG".into())));
        assert_eq!(parse(b"-ERR no\r\n"), Ok(RespValue::Error("ERR no".into())));
        assert_eq!(parse(b":-12\r\n"), Ok(RespValue::Integer(-12)));
        assert_eq!(
            parse(b"$2\r\na\n\r\n"),
            Ok(RespValue::Bulk(b"a\n".to_vec()))
        );
        assert_eq!(parse(b"$0\r\n\r\n"), Ok(RespValue::Bulk(Vec::new())));
        assert_eq!(parse(b"$-1\r\n"), Ok(RespValue::Nil));
        assert_eq!(parse(b"*-1\r\n"), Ok(RespValue::Nil));
    }

    #[test]
    fn parses_nested_arrays() {
        let parsed = parse(b"*3\r\n:1\r\n*2\r\n$1\r\nx\r\n-E\r\n*0\r\n");
        let expected = RespValue::Array(vec![
            RespValue::Integer(1),
            RespValue::Array(vec![
                RespValue::Bulk(b"x".to_vec()),
                RespValue::Error("E".into()),
            ]),
            RespValue::Array(Vec::new()),
        ]);
        assert_eq!(parsed, Ok(expected));
    }

    #[test]
    fn rejects_malformed_replies() {
        assert!(parse(b"").is_err());
        assert!(parse(b"+OK\n").is_err());
        assert!(parse(b"+OK").is_err());
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b":abc\r\n").is_err());
        assert!(parse(b"$-2\r\n").is_err());
        assert!(parse(b"$3\r\nab\r\n").is_err());
        assert!(parse(b"$1\r\nabc").is_err());
        assert!(parse(b"*2\r\n:1\r\n").is_err());
    }

    #[test]
    fn rejects_excessive_nesting() {
        let wire = b"*1\r\n".repeat(MAX_DEPTH + 2);
        assert!(parse(&wire).unwrap_err().contains("nested"));
    }

    #[test]
    fn accessors_match_variants() {
        assert_eq!(RespValue::Simple("OK".into()).as_str(), Some("OK"));
        assert_eq!(RespValue::Bulk(b"v".to_vec()).as_str(), Some("v"));
        assert_eq!(RespValue::Bulk(vec![0xff]).as_str(), None);
        assert_eq!(RespValue::Nil.as_str(), None);
        assert_eq!(RespValue::Integer(7).as_integer(), Some(7));
        assert_eq!(RespValue::Simple("7".into()).as_integer(), None);
    }
}
