//! Bounds-checked little helpers for reading and writing fixed-width integers.
//!
//! Every decoder in this crate reads through [`Reader`], whose getters return `None` instead of
//! panicking when the input is short; that is what makes "decoding arbitrary bytes never panics"
//! true by construction rather than by care at each call site.

/// A cursor over untrusted bytes. Reads never panic; a short read returns `None` and leaves the
/// cursor where it was.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Some(a)
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|a| a[0])
    }
    pub(crate) fn u16_le(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }
    pub(crate) fn u32_le(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    pub(crate) fn u64_le(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
    pub(crate) fn u16_be(&mut self) -> Option<u16> {
        self.array().map(u16::from_be_bytes)
    }
    pub(crate) fn u32_be(&mut self) -> Option<u32> {
        self.array().map(u32::from_be_bytes)
    }
    pub(crate) fn u64_be(&mut self) -> Option<u64> {
        self.array().map(u64::from_be_bytes)
    }
}

/// Writes fixed-width integers into a fixed array, front to back. Used by the header encoders so
/// that a header is built on the stack.
pub(crate) struct ArrayWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> ArrayWriter<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        ArrayWriter { buf, pos: 0 }
    }
    /// Panics only on a programming error (header layout longer than its array), never on input.
    pub(crate) fn put(&mut self, bytes: &[u8]) {
        self.buf[self.pos..self.pos + bytes.len()].copy_from_slice(bytes);
        self.pos += bytes.len();
    }
    pub(crate) fn written(&self) -> usize {
        self.pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_return_none_and_do_not_advance() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u32_le(), None);
        assert_eq!(r.remaining(), 3);
        assert_eq!(r.u16_be(), Some(0x0102));
        assert_eq!(r.u16_le(), None);
        assert_eq!(r.u8(), Some(3));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.take(usize::MAX), None);
    }
}
