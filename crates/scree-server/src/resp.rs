//! The Redis protocol on the wire: a bounded, incremental request parser (multibulk RESP
//! and inline commands, as Redis's `processMultibulkBuffer`/`processInlineBuffer` read
//! them) and the reply encoder for RESP2 and RESP3.
//!
//! The parser never allocates more than the bytes it has been given: every length is checked
//! against [`Limits`] before it is trusted, and a malformed request is a [`ProtocolError`]
//! whose text follows Redis's (`Protocol error: invalid bulk length`), after which the server
//! replies `-ERR <text>` and closes the connection.

use std::fmt;
use std::ops::Range;

/// Bounds on one request (Redis's `proto-max-bulk-len`, its multibulk count, and
/// `PROTO_INLINE_MAX_SIZE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string of a request, in bytes. Redis's default is 512 MiB; Scree's is
    /// 64 MiB, the engine's largest value (`scree::MAX_VALUE_BYTES`).
    pub max_bulk: usize,
    /// Most elements of one multibulk request. Redis allows up to 2^31−1; the default here is
    /// 1,048,576.
    pub max_elements: usize,
    /// Longest inline request line, and longest count line of a multibulk request (Redis's
    /// 64 KiB).
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: scree::MAX_VALUE_BYTES,
            max_elements: 1 << 20,
            max_inline: 64 * 1024,
        }
    }
}

/// A request the parser refuses; the text is what follows `-ERR ` in the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn perr<T>(what: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(what.into()))
}

/// One complete request found at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A command: its arguments as byte ranges of the first `consumed` bytes (an inline
    /// command's arguments may be unescaped, so they are given as owned bytes instead).
    Command {
        /// Bytes of the buffer the request used.
        consumed: usize,
        /// The arguments (at least one).
        args: Args,
    },
    /// Bytes that hold no command (an empty inline line, `*0`, `*-1`): skip them.
    Empty {
        /// Bytes to skip.
        consumed: usize,
    },
}

/// A command's arguments: ranges of the request's bytes (multibulk) or unescaped copies
/// (inline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// Ranges into the buffer.
    Ranges(Vec<Range<usize>>),
    /// Owned arguments of an inline command.
    Owned(Vec<Vec<u8>>),
}

/// Finds `needle` in `hay` from `from`.
fn find(hay: &[u8], from: usize, needle: u8) -> Option<usize> {
    hay.get(from..)?
        .iter()
        .position(|&b| b == needle)
        .map(|p| p + from)
}

/// Parses a decimal integer as Redis's `string2ll` does (optional `-`, digits, no `+`, no
/// spaces, no leading zeros but for `0` itself).
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    if digits.len() > 1 && digits.first() == Some(&b'0') {
        return None;
    }
    if neg && digits == b"0" {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let x = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if neg {
            v.checked_sub(x)?
        } else {
            v.checked_add(x)?
        };
    }
    Some(v)
}

/// Parses the request at the start of `buf`: `Ok(None)` if it is not complete yet.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Option<Parsed>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, limits),
        Some(_) => parse_inline(buf, limits),
    }
}

/// A `\r`-terminated count line starting at `at` (after its type byte): the integer, and the
/// offset after its `\r\n`. `Ok(None)` if incomplete.
fn count_line(
    buf: &[u8],
    at: usize,
    limits: &Limits,
    too_big: &str,
) -> Result<Option<(Option<i64>, usize)>, ProtocolError> {
    let Some(cr) = find(buf, at, b'\r') else {
        if buf.len() - at > limits.max_inline {
            return perr(too_big);
        }
        return Ok(None);
    };
    if cr - at > limits.max_inline {
        return perr(too_big);
    }
    // The `\n` after the `\r`.
    match buf.get(cr + 1) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return perr("expected '\\n' after '\\r' in a count line"),
    }
    let n = buf.get(at + 1..cr).and_then(parse_i64);
    Ok(Some((n, cr + 2)))
}

fn parse_multibulk(buf: &[u8], limits: &Limits) -> Result<Option<Parsed>, ProtocolError> {
    let Some((n, mut pos)) = count_line(buf, 0, limits, "too big mbulk count string")? else {
        return Ok(None);
    };
    let Some(n) = n else {
        return perr("invalid multibulk length");
    };
    if n <= 0 {
        return Ok(Some(Parsed::Empty { consumed: pos }));
    }
    if n as u64 > limits.max_elements as u64 {
        return perr("invalid multibulk length");
    }
    let n = n as usize;
    // Never trust the count for an allocation: it grows with the bytes actually present.
    let mut args = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        match buf.get(pos) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&c) => {
                return perr(format!("expected '$', got '{}'", char::from(c)));
            }
        }
        let Some((len, at)) = count_line(buf, pos, limits, "too big bulk count string")? else {
            return Ok(None);
        };
        let len = match len {
            Some(l) if l >= 0 && l as u64 <= limits.max_bulk as u64 => l as usize,
            _ => return perr("invalid bulk length"),
        };
        let end = at + len;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if buf.get(end..end + 2) != Some(b"\r\n") {
            return perr("expected '\\r\\n' after a bulk string");
        }
        args.push(at..end);
        pos = end + 2;
    }
    Ok(Some(Parsed::Command {
        consumed: pos,
        args: Args::Ranges(args),
    }))
}

fn parse_inline(buf: &[u8], limits: &Limits) -> Result<Option<Parsed>, ProtocolError> {
    let Some(nl) = find(buf, 0, b'\n') else {
        if buf.len() > limits.max_inline {
            return perr("too big inline request");
        }
        return Ok(None);
    };
    if nl > limits.max_inline {
        return perr("too big inline request");
    }
    let mut line = buf.get(..nl).unwrap_or_default();
    if let Some(l) = line.strip_suffix(b"\r") {
        line = l;
    }
    let args =
        split_args(line).ok_or_else(|| ProtocolError("unbalanced quotes in request".into()))?;
    if args.is_empty() {
        return Ok(Some(Parsed::Empty { consumed: nl + 1 }));
    }
    if args.len() > limits.max_elements {
        return perr("invalid multibulk length");
    }
    Ok(Some(Parsed::Command {
        consumed: nl + 1,
        args: Args::Owned(args),
    }))
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Splits an inline line into arguments as Redis's `sdssplitargs` does: blanks separate,
/// `"..."` takes `\n \r \t \b \a \\ \" \xHH` escapes, `'...'` takes `\'`; a closing quote must
/// be followed by a blank or the end; a NUL ends the line, as it ends Redis's C string. `None`
/// for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let line = match line.iter().position(|&b| b == 0) {
        Some(nul) => line.get(..nul).unwrap_or_default(),
        None => line,
    };
    let mut out = Vec::new();
    let mut i = 0;
    let at = |i: usize| line.get(i).copied();
    loop {
        while at(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        if at(i).is_none() {
            return Some(out);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = at(i);
            if inq {
                match c {
                    None => return None,
                    Some(b'\\') if at(i + 1) == Some(b'x') => {
                        match (at(i + 2).and_then(hex), at(i + 3).and_then(hex)) {
                            (Some(h), Some(l)) => {
                                cur.push(h * 16 + l);
                                i += 3;
                            }
                            _ => cur.push(b'\\'),
                        }
                    }
                    Some(b'\\') if at(i + 1).is_some() => {
                        i += 1;
                        cur.push(match at(i) {
                            Some(b'n') => b'\n',
                            Some(b'r') => b'\r',
                            Some(b't') => b'\t',
                            Some(b'b') => 8,
                            Some(b'a') => 7,
                            Some(o) => o,
                            None => return None,
                        });
                    }
                    Some(b'"') => {
                        if at(i + 1).is_some_and(|n| !n.is_ascii_whitespace()) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(o) => cur.push(o),
                }
            } else if insq {
                match c {
                    None => return None,
                    Some(b'\\') if at(i + 1) == Some(b'\'') => {
                        i += 1;
                        cur.push(b'\'');
                    }
                    Some(b'\'') => {
                        if at(i + 1).is_some_and(|n| !n.is_ascii_whitespace()) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(o) => cur.push(o),
                }
            } else {
                match c {
                    None => break,
                    Some(b' ' | b'\n' | b'\r' | b'\t') => break,
                    Some(b'"') => inq = true,
                    Some(b'\'') => insq = true,
                    Some(o) => cur.push(o),
                }
            }
            i += 1;
        }
        out.push(cur);
    }
}

/// A reply, encoded for the connection's protocol version.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+text`
    Simple(&'static str),
    /// `+text` built at run time.
    Status(String),
    /// `-text` (the text includes its code: `ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// `:n`
    Int(i64),
    /// `$len bytes`
    Bulk(Vec<u8>),
    /// RESP2 `$-1`, RESP3 `_`.
    Nil,
    /// RESP2 `*-1`, RESP3 `_`.
    NilArray,
    /// `*n ...`
    Array(Vec<Reply>),
    /// RESP3 `%n k v ...`; RESP2 a flat array of 2n elements.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `,x`; RESP2 a bulk string of the number as Redis formats it.
    Double(f64),
    /// RESP3 `=len txt:...` (INFO, CLIENT INFO); RESP2 a bulk string.
    Verbatim(String),
}

impl Reply {
    /// `-ERR <msg>`.
    pub fn err(msg: impl fmt::Display) -> Reply {
        Reply::Error(format!("ERR {msg}"))
    }

    /// A bulk string from anything byte-like.
    pub fn bulk(b: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(b.as_ref().to_vec())
    }

    /// `+OK`
    pub const OK: Reply = Reply::Simple("OK");
}

/// Formats a double as Redis's `%.17g` reply does (integral values without a fraction,
/// `inf`/`-inf` for infinities).
pub fn format_double(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x.is_nan() {
        return "nan".into();
    }
    if x == x.trunc() && x.abs() < 1e17 {
        return format!("{}", x as i64);
    }
    // The shortest form that reads back as the same double (what Redis 7.2's `fpconv_dtoa`
    // prints; 7.0 printed `%.17g`'s 17 digits): clients parse either.
    format!("{x}")
}

fn put_len(out: &mut Vec<u8>, tag: u8, n: usize) {
    out.push(tag);
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `r` encoded for protocol version `proto` (2 or 3).
pub fn encode(r: &Reply, proto: u8, out: &mut Vec<u8>) {
    match r {
        Reply::Simple(s) => {
            out.push(b'+');
            out.extend_from_slice(s.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Reply::Status(s) => {
            out.push(b'+');
            out.extend_from_slice(clean_line(s).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Reply::Error(s) => {
            out.push(b'-');
            out.extend_from_slice(clean_line(s).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Reply::Int(n) => {
            out.push(b':');
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Reply::Bulk(b) => {
            put_len(out, b'$', b.len());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Nil if proto >= 3 => out.extend_from_slice(b"_\r\n"),
        Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
        Reply::NilArray if proto >= 3 => out.extend_from_slice(b"_\r\n"),
        Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
        Reply::Array(items) => {
            put_len(out, b'*', items.len());
            for i in items {
                encode(i, proto, out);
            }
        }
        Reply::Map(pairs) => {
            if proto >= 3 {
                put_len(out, b'%', pairs.len());
            } else {
                put_len(out, b'*', pairs.len() * 2);
            }
            for (k, v) in pairs {
                encode(k, proto, out);
                encode(v, proto, out);
            }
        }
        Reply::Double(x) => {
            let s = format_double(*x);
            if proto >= 3 {
                out.push(b',');
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            } else {
                encode(&Reply::Bulk(s.into_bytes()), proto, out);
            }
        }
        Reply::Verbatim(s) => {
            if proto >= 3 {
                put_len(out, b'=', s.len() + 4);
                out.extend_from_slice(b"txt:");
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            } else {
                encode(&Reply::Bulk(s.as_bytes().to_vec()), proto, out);
            }
        }
    }
}

/// A simple string or error may not hold a line break (Redis replaces them with spaces).
fn clean_line(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\r', '\n']) {
        std::borrow::Cow::Owned(s.replace(['\r', '\n'], " "))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_of(buf: &[u8], p: Parsed) -> (usize, Vec<Vec<u8>>) {
        match p {
            Parsed::Command { consumed, args } => (
                consumed,
                match args {
                    Args::Ranges(r) => r.into_iter().map(|r| buf[r].to_vec()).collect(),
                    Args::Owned(o) => o,
                },
            ),
            Parsed::Empty { .. } => panic!("empty"),
        }
    }

    fn lim() -> Limits {
        Limits {
            max_bulk: 16,
            max_elements: 4,
            max_inline: 32,
        }
    }

    #[test]
    fn multibulk_and_every_prefix_is_incomplete() {
        let req = b"*2\r\n$3\r\nGET\r\n$5\r\nhello\r\n";
        for cut in 0..req.len() {
            assert_eq!(
                parse(&req[..cut], &lim()),
                Ok(None),
                "prefix of {cut} bytes"
            );
        }
        let p = parse(req, &lim()).unwrap().unwrap();
        assert_eq!(
            args_of(req, p),
            (req.len(), vec![b"GET".to_vec(), b"hello".to_vec()])
        );
    }

    #[test]
    fn pipelined_requests_are_parsed_one_at_a_time() {
        let req = b"*1\r\n$4\r\nPING\r\nPING\r\n";
        let p = parse(req, &lim()).unwrap().unwrap();
        let (n, a) = args_of(req, p);
        assert_eq!((n, a), (14, vec![b"PING".to_vec()]));
        let p = parse(&req[14..], &lim()).unwrap().unwrap();
        assert_eq!(args_of(&req[14..], p), (6, vec![b"PING".to_vec()]));
    }

    #[test]
    fn binary_bulk_strings_keep_their_bytes() {
        let req = b"*1\r\n$4\r\n\r\n\0\xff\r\n";
        let p = parse(req, &lim()).unwrap().unwrap();
        assert_eq!(args_of(req, p).1, vec![b"\r\n\0\xff".to_vec()]);
    }

    #[test]
    fn empty_requests_are_skipped() {
        assert_eq!(
            parse(b"*0\r\n", &lim()),
            Ok(Some(Parsed::Empty { consumed: 4 }))
        );
        assert_eq!(
            parse(b"*-1\r\n", &lim()),
            Ok(Some(Parsed::Empty { consumed: 5 }))
        );
        assert_eq!(
            parse(b"\r\n", &lim()),
            Ok(Some(Parsed::Empty { consumed: 2 }))
        );
        assert_eq!(
            parse(b"   \n", &lim()),
            Ok(Some(Parsed::Empty { consumed: 4 }))
        );
    }

    fn err(buf: &[u8]) -> String {
        parse(buf, &lim()).unwrap_err().to_string()
    }

    #[test]
    fn malformed_requests_name_what_is_wrong_in_redis_words() {
        assert_eq!(err(b"*x\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(err(b"*5\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(
            err(b"*1\r\n:1\r\n"),
            "Protocol error: expected '$', got ':'"
        );
        assert_eq!(err(b"*1\r\n$-1\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(err(b"*1\r\n$17\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(err(b"*1\r\n$x\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(
            err(b"*1\r\n$1\r\nab\r\n"),
            "Protocol error: expected '\\r\\n' after a bulk string"
        );
        assert_eq!(
            err(&[b'*'; 40]),
            "Protocol error: too big mbulk count string"
        );
        let mut long_count = b"*1\r\n$".to_vec();
        long_count.extend_from_slice(&[b'1'; 40]);
        assert_eq!(
            err(&long_count),
            "Protocol error: too big bulk count string"
        );
        assert_eq!(err(&[b'a'; 40]), "Protocol error: too big inline request");
        assert_eq!(
            err(b"SET \"a b\n"),
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            err(b"SET \"a\"b\n"),
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            err(b"a b c d e\n"),
            "Protocol error: invalid multibulk length"
        );
    }

    #[test]
    fn limits_allow_what_they_name() {
        // Exactly max_bulk bytes and max_elements elements.
        let mut req = b"*4\r\n$16\r\n".to_vec();
        req.extend_from_slice(&[b'v'; 16]);
        req.extend_from_slice(b"\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n");
        let p = parse(&req, &lim()).unwrap().unwrap();
        let (n, a) = args_of(&req, p);
        assert_eq!(n, req.len());
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn inline_commands_split_like_sdssplitargs() {
        assert_eq!(
            split_args(b"set  k \"a\\x41\\n\" 'it\\'s'").unwrap(),
            vec![
                b"set".to_vec(),
                b"k".to_vec(),
                b"aA\n".to_vec(),
                b"it's".to_vec()
            ]
        );
        assert_eq!(split_args(b"").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(split_args(b"\"\"").unwrap(), vec![Vec::<u8>::new()]);
        assert!(split_args(b"'abc").is_none());
        // A NUL ends the line (it once made an endless run of empty arguments).
        assert_eq!(split_args(b"a\0b c").unwrap(), vec![b"a".to_vec()]);
        assert_eq!(split_args(b"\0 x").unwrap(), Vec::<Vec<u8>>::new());
        let p = parse(b"PING hi\r\nrest", &lim()).unwrap().unwrap();
        assert_eq!(args_of(b"", p), (9, vec![b"PING".to_vec(), b"hi".to_vec()]));
    }

    #[test]
    fn integers_parse_as_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.0",
            b"abc",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    fn enc(r: &Reply, proto: u8) -> Vec<u8> {
        let mut v = Vec::new();
        encode(r, proto, &mut v);
        v
    }

    #[test]
    fn replies_encode_for_resp2_and_resp3() {
        assert_eq!(enc(&Reply::OK, 2), b"+OK\r\n");
        assert_eq!(enc(&Reply::err("x\ny"), 2), b"-ERR x y\r\n");
        assert_eq!(enc(&Reply::Int(-3), 2), b":-3\r\n");
        assert_eq!(enc(&Reply::bulk("ab"), 3), b"$2\r\nab\r\n");
        assert_eq!(enc(&Reply::Nil, 2), b"$-1\r\n");
        assert_eq!(enc(&Reply::Nil, 3), b"_\r\n");
        assert_eq!(enc(&Reply::NilArray, 2), b"*-1\r\n");
        let m = Reply::Map(vec![(Reply::bulk("f"), Reply::bulk("v"))]);
        assert_eq!(enc(&m, 2), b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(enc(&m, 3), b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(enc(&Reply::Double(1.5), 2), b"$3\r\n1.5\r\n");
        assert_eq!(enc(&Reply::Double(2.0), 3), b",2\r\n");
        assert_eq!(enc(&Reply::Double(f64::INFINITY), 3), b",inf\r\n");
        assert_eq!(enc(&Reply::Verbatim("a".into()), 3), b"=5\r\ntxt:a\r\n");
        assert_eq!(enc(&Reply::Verbatim("a".into()), 2), b"$1\r\na\r\n");
    }

    proptest::proptest! {
        /// Any bytes: the parser returns a command within the buffer, asks for more, or
        /// refuses; never panics, never consumes more than it was given.
        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Ok(Some(p)) = parse(&buf, &lim()) {
                match p {
                    Parsed::Command { consumed, args } => {
                        proptest::prop_assert!(consumed <= buf.len());
                        if let Args::Ranges(r) = args {
                            for r in r {
                                proptest::prop_assert!(r.end <= consumed);
                            }
                        }
                    }
                    Parsed::Empty { consumed } => proptest::prop_assert!(consumed <= buf.len() && consumed > 0),
                }
            }
        }

        /// Encoded commands parse back to the same arguments.
        #[test]
        fn encoded_commands_round_trip(args in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..16), 1..4)) {
            let mut buf = format!("*{}\r\n", args.len()).into_bytes();
            for a in &args {
                buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                buf.extend_from_slice(a);
                buf.extend_from_slice(b"\r\n");
            }
            let p = parse(&buf, &lim()).unwrap().unwrap();
            let (n, got) = args_of(&buf, p);
            proptest::prop_assert_eq!(n, buf.len());
            proptest::prop_assert_eq!(got, args);
        }
    }
}
