//! The TLS-PSK key file that GnuTLS's `psktool`, nbdkit and qemu-nbd use, shared by the server
//! (which loads every key) and the client (which picks its own identity's line).
//!
//! One `identity:hexkey` per line; blank lines and lines starting with `#` are skipped. The key
//! is after the *last* `:`, so an identity may itself contain colons. A key is 1 to
//! [`MAX_PSK_BYTES`] bytes, written as an even number of hex digits. Example: `alice:00ff10` is
//! identity `alice` with the 3-byte key 00 ff 10.
//!
//! Sans-I/O like the rest of the crate: [`parse`] takes the file's text and returns every line
//! or the first bad one, with its 1-based line number; callers add the file's name.

/// Longest key accepted: OpenSSL's own limit (`PSK_MAX_PSK_LEN`), which both sides use.
pub const MAX_PSK_BYTES: usize = 256;

/// One key line.
#[derive(Clone, PartialEq, Eq)]
pub struct PskLine {
    /// 1-based line number in the file.
    pub line: usize,
    pub identity: String,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for PskLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a key.
        f.debug_struct("PskLine")
            .field("line", &self.line)
            .field("identity", &self.identity)
            .field("key_bytes", &self.key.len())
            .finish()
    }
}

/// A bad line: its 1-based number and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PskLineError {
    pub line: usize,
    pub problem: String,
}

/// Every key line of a psktool file, in file order, or the first bad line.
pub fn parse(text: &str) -> Result<Vec<PskLine>, PskLineError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |problem: String| PskLineError {
            line: i + 1,
            problem,
        };
        let Some((identity, hex)) = line.rsplit_once(':') else {
            return Err(bad("no `:` between identity and key".into()));
        };
        if identity.is_empty() || identity.len() > 255 {
            return Err(bad(format!(
                "identity of {} bytes; expected 1..=255",
                identity.len()
            )));
        }
        let key = decode_hex(hex).map_err(bad)?;
        if key.is_empty() || key.len() > MAX_PSK_BYTES {
            return Err(bad(format!(
                "key of {} bytes; expected 1..={MAX_PSK_BYTES}",
                key.len()
            )));
        }
        out.push(PskLine {
            line: i + 1,
            identity: identity.to_owned(),
            key,
        });
    }
    Ok(out)
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err(format!(
            "key has {} hex digits; expected an even number",
            hex.len()
        ));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| {
                    format!(
                        "key digit pair {:?} is not hex",
                        hex.get(i..i + 2).unwrap_or(hex)
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_keys_and_errors() {
        let keys = parse("# keys\nalice:00ff10\n\nb:ob:abcdef01\n").unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!((keys[0].line, keys[0].identity.as_str()), (2, "alice"));
        assert_eq!(keys[0].key, [0x00, 0xff, 0x10]);
        assert_eq!(keys[1].identity, "b:ob");
        let e = parse("alice:0g").unwrap_err();
        assert!(e.line == 1 && e.problem.contains("\"0g\""), "{e:?}");
        assert!(parse("alice:abc")
            .unwrap_err()
            .problem
            .contains("3 hex digits"));
        assert!(parse("\nnocolon").unwrap_err().line == 2);
        assert!(parse(":00").unwrap_err().problem.contains("identity"));
        assert!(parse("a:").unwrap_err().problem.contains("0 bytes"));
        let long = format!("a:{}", "00".repeat(MAX_PSK_BYTES + 1));
        assert!(parse(&long).unwrap_err().problem.contains("257 bytes"));
        // A multi-byte character where a hex pair would start is an error, not a panic.
        assert!(parse("a:0é").is_err());
        assert!(!format!("{:?}", keys[0]).contains("255"));
    }
}
