//! Streams a trace file's records: lines read into a bounded buffer, the format detected from
//! the first lines where none is given, times made relative to the first record, bad lines
//! counted or reported (the trace module's essay).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::detect;
use super::format::TraceFormat;
use super::record::{BadLines, Line, TraceError, TraceRecord, MAX_LINE_BYTES, READ_BUFFER_BYTES};

/// Streams the records of a trace; see the module essay.
pub struct TraceReader<R> {
    input: R,
    source_name: String,
    format: TraceFormat,
    bad_lines: BadLines,
    line: Vec<u8>,
    line_no: u64,
    origin_ns: Option<u64>,
    skipped: u64,
    first_skipped: Option<String>,
    /// An error was returned (I/O, or a bad line with [`BadLines::Fail`]): the iterator is
    /// over.
    failed: bool,
}

/// Opens a trace file; `format: None` detects it.
pub fn open(
    path: &Path,
    format: Option<TraceFormat>,
    bad_lines: BadLines,
) -> Result<TraceReader<BufReader<File>>, TraceError> {
    let source_name = path.display().to_string();
    let file = File::open(path).map_err(|source| TraceError::Io {
        source_name: source_name.clone(),
        source,
    })?;
    TraceReader::new(
        BufReader::with_capacity(READ_BUFFER_BYTES, file),
        &source_name,
        format,
        bad_lines,
    )
}

impl<R: BufRead> TraceReader<R> {
    /// A reader of `input`; `source_name` starts every error. `format: None` detects it from
    /// the first lines (peeked, not consumed).
    pub fn new(
        mut input: R,
        source_name: &str,
        format: Option<TraceFormat>,
        bad_lines: BadLines,
    ) -> Result<TraceReader<R>, TraceError> {
        let format = match format {
            Some(f) => f,
            None => {
                let head = input.fill_buf().map_err(|source| TraceError::Io {
                    source_name: source_name.to_string(),
                    source,
                })?;
                detect::detect(head).map_err(|why| TraceError::Undetected {
                    source_name: source_name.to_string(),
                    known: TraceFormat::known(),
                    why,
                })?
            }
        };
        Ok(TraceReader {
            input,
            source_name: source_name.to_string(),
            format,
            bad_lines,
            line: Vec::with_capacity(256),
            line_no: 0,
            origin_ns: None,
            skipped: 0,
            first_skipped: None,
            failed: false,
        })
    }

    pub fn format(&self) -> TraceFormat {
        self.format
    }

    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> u64 {
        self.line_no
    }

    /// Bad lines skipped so far (with [`BadLines::Skip`]).
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    /// The first bad line skipped, as its error message.
    pub fn first_skipped(&self) -> Option<&str> {
        self.first_skipped.as_deref()
    }

    /// Reads the next line into `self.line` (without its end of line); `Ok(false)` at the end.
    /// A line longer than [`MAX_LINE_BYTES`] is cut there and the rest consumed unkept.
    fn read_line(&mut self) -> std::io::Result<Option<bool>> {
        self.line.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            let buf = match self.input.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(any.then_some(too_long));
            }
            any = true;
            let (chunk, used, done) = match memchr_newline(buf) {
                Some(i) => (&buf[..i], i + 1, true),
                None => (buf, buf.len(), false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
            if chunk.len() > room {
                too_long = true;
            }
            self.line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            self.input.consume(used);
            if done {
                return Ok(Some(too_long));
            }
        }
    }

    /// `r` with its time from the trace's first record.
    fn relative(&mut self, mut r: TraceRecord) -> TraceRecord {
        let origin = *self.origin_ns.get_or_insert(r.time_ns);
        r.time_ns = r.time_ns.saturating_sub(origin);
        r
    }

    fn bad(&mut self, message: String) -> Option<Result<TraceRecord, TraceError>> {
        let err = TraceError::BadLine {
            source_name: self.source_name.clone(),
            line: self.line_no,
            message,
        };
        match self.bad_lines {
            BadLines::Fail => {
                // The first error ends the trace: nothing after it is read.
                self.failed = true;
                Some(Err(err))
            }
            BadLines::Skip => {
                self.skipped += 1;
                if self.first_skipped.is_none() {
                    self.first_skipped = Some(err.to_string());
                }
                None
            }
        }
    }
}

/// The index of the first `\n`, eight bytes at a time (a word holds a `\n` byte when
/// `x ^ 0x0a0a..` has a zero byte; the classic has-zero-byte test finds it).
fn memchr_newline(buf: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut chunks = buf.chunks_exact(8);
    let mut at = 0;
    for chunk in chunks.by_ref() {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
        let x = word ^ (ONES * u64::from(b'\n'));
        if x.wrapping_sub(ONES) & !x & HIGHS != 0 {
            break;
        }
        at += 8;
    }
    buf[at..].iter().position(|&b| b == b'\n').map(|i| at + i)
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            // Fast path: a whole line in the read buffer is parsed where it lies.
            let format = self.format;
            let fast = match self.input.fill_buf() {
                Ok(buf) => match memchr_newline(buf) {
                    Some(i) if i <= MAX_LINE_BYTES => {
                        let outcome = match std::str::from_utf8(&buf[..i]) {
                            Ok(text) => {
                                let text = text.trim();
                                if text.is_empty() || text.starts_with('#') {
                                    Ok(Line::Other)
                                } else {
                                    format.parse_line(text)
                                }
                            }
                            // The slow path reports it with its byte offset.
                            Err(_) => Err(String::new()),
                        };
                        match outcome {
                            Err(m) if m.is_empty() => None,
                            outcome => {
                                self.input.consume(i + 1);
                                Some(outcome)
                            }
                        }
                    }
                    _ => None,
                },
                Err(_) => None, // the slow path reports it
            };
            if let Some(outcome) = fast {
                self.line_no += 1;
                match outcome {
                    Ok(Line::Io(r)) => return Some(Ok(self.relative(r))),
                    Ok(Line::Event | Line::Other) => continue,
                    Err(message) => match self.bad(message) {
                        Some(e) => return Some(e),
                        None => continue,
                    },
                }
            }
            let too_long = match self.read_line() {
                Ok(Some(too_long)) => too_long,
                Ok(None) => return None,
                Err(source) => {
                    self.failed = true;
                    return Some(Err(TraceError::Io {
                        source_name: self.source_name.clone(),
                        source,
                    }));
                }
            };
            self.line_no += 1;
            if too_long {
                let msg = format!(
                    "line longer than {MAX_LINE_BYTES} bytes: expected {}",
                    self.format.expected()
                );
                match self.bad(msg) {
                    Some(e) => return Some(e),
                    None => continue,
                }
            }
            let text = match std::str::from_utf8(&self.line) {
                Ok(t) => t.trim(),
                Err(e) => {
                    let msg = format!(
                        "byte {} is not UTF-8 text: expected {}",
                        e.valid_up_to() + 1,
                        self.format.expected()
                    );
                    match self.bad(msg) {
                        Some(e) => return Some(e),
                        None => continue,
                    }
                }
            };
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            match self.format.parse_line(text) {
                Ok(Line::Io(r)) => return Some(Ok(self.relative(r))),
                Ok(Line::Event | Line::Other) => continue,
                Err(message) => match self.bad(message) {
                    Some(e) => return Some(e),
                    None => continue,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str, bad: BadLines) -> (Result<Vec<TraceRecord>, TraceError>, u64) {
        let mut r = TraceReader::new(text.as_bytes(), "t.txt", None, bad).unwrap();
        let v = r.by_ref().collect::<Result<Vec<_>, _>>();
        (v, r.skipped_lines())
    }

    #[test]
    fn times_start_at_the_first_record_and_errors_name_the_line() {
        let (v, _) = read_all(
            "# msr\n128166372003061629,hm,1,Read,0,4096,1\n128166372003061639,hm,1,Write,4096,512,1\n128166372003061620,hm,1,Read,0,512,1\n",
            BadLines::Fail,
        );
        let v = v.unwrap();
        assert_eq!(
            v.iter().map(|r| r.time_ns).collect::<Vec<_>>(),
            [0, 1000, 0]
        );
        let (e, _) = read_all("0,R,0,4096\n\n10,X,0,4096\n", BadLines::Fail);
        let e = e.unwrap_err().to_string();
        assert_eq!(e, "t.txt:3: op `X`: expected R, W, read or write");
        let mut r = TraceReader::new(
            &b"1,X,0,1\n2,R,0,512\n"[..],
            "t",
            Some(TraceFormat::Csv),
            BadLines::Fail,
        )
        .unwrap();
        assert!(r.next().unwrap().is_err());
        assert!(r.next().is_none(), "nothing is read after the first error");
    }

    #[test]
    fn skipping_counts_bad_lines() {
        let text = "0,R,0,4096\n10,X,0,4096\n20,W,0\n30,W,4096,4096\n";
        let (v, skipped) = read_all(text, BadLines::Skip);
        assert_eq!(v.unwrap().len(), 2);
        assert_eq!(skipped, 2);
    }

    #[test]
    fn long_lines_are_bad_and_not_kept() {
        let long = format!("0,R,0,4096\n{}\n5,W,0,512\n", "9".repeat(100_000));
        let mut r =
            TraceReader::new(long.as_bytes(), "t", Some(TraceFormat::Csv), BadLines::Skip).unwrap();
        assert_eq!(r.by_ref().count(), 2);
        assert_eq!(r.skipped_lines(), 1);
        assert!(r
            .first_skipped()
            .unwrap()
            .contains("t:2: line longer than 4096"));
        assert!(r.line.capacity() <= 2 * MAX_LINE_BYTES);
    }

    #[test]
    fn non_utf8_and_crlf() {
        let text = b"0,R,0,4096\r\n1,\xff,0,4096\r\n";
        let mut r = TraceReader::new(&text[..], "t", None, BadLines::Fail).unwrap();
        assert!(r.next().unwrap().is_ok());
        let e = r.next().unwrap().unwrap_err().to_string();
        assert!(e.starts_with("t:2: byte 3 is not UTF-8"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn newline_search_matches_a_plain_scan(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            proptest::prop_assert_eq!(memchr_newline(&bytes), bytes.iter().position(|&b| b == b'\n'));
        }
    }
}
