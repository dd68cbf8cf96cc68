//! Writing a large JSON document in serde_json `Value`'s shape without building the `Value`.
//!
//! `serde_json::json!` turns everything it is given into a `Value` tree, whose objects are
//! sorted maps: the text it prints has every object's keys in sorted order. A study's
//! `study.json` written that way holds the whole tree in memory at once, several times the
//! size of its text (the quick `reflex` study: a 15 MB file from a 52 MB tree, held beside the
//! 16 MB text it was printed into). Here each element of a large array is turned into its own
//! `Value` and printed straight to the file before the next one is built, so what is held is
//! one element's tree; the text is byte-for-byte the one `json!` and `to_vec_pretty` printed
//! (a test below holds it to that).
//!
//! A caller writes the top-level object as a struct whose fields are declared in sorted key
//! order, each field either a plain scalar, an [`AsValue`] or an [`EachAsValue`].

use std::io::Write;
use std::path::Path;

use serde::ser::{Error as _, Serialize, Serializer};

/// `T` printed as its `serde_json::Value` prints: the keys of every object in it sorted.
pub struct AsValue<'a, T: ?Sized>(pub &'a T);

impl<T: Serialize + ?Sized> Serialize for AsValue<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::to_value(self.0)
            .map_err(S::Error::custom)?
            .serialize(s)
    }
}

/// A slice printed as an array of [`AsValue`]s, one element's `Value` alive at a time.
pub struct EachAsValue<'a, T>(pub &'a [T]);

impl<T: Serialize> Serialize for EachAsValue<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(AsValue))
    }
}

/// Prints `value` pretty (as `serde_json::to_vec_pretty` does) into the file at `path`,
/// through a buffer rather than a copy of the whole text.
pub fn write_pretty(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("writing {}: {e}", path.display());
    let file = std::fs::File::create(path).map_err(|e| err(&e))?;
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer_pretty(&mut out, value).map_err(|e| err(&e))?;
    out.flush().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Keys declared out of order, a map with integer keys (sorted as strings by `Value`),
    /// floats, an absent option and an empty list: what `Value` reorders or reformats.
    #[derive(serde::Serialize)]
    struct Inner {
        zeta: f64,
        alpha: Option<u32>,
        by_count: HashMap<u64, &'static str>,
        empty: Vec<u8>,
        nan: f64,
    }

    #[derive(serde::Serialize)]
    struct Sorted<'a> {
        items: EachAsValue<'a, Inner>,
        none: AsValue<'a, Option<Inner>>,
        one: AsValue<'a, Inner>,
        seed: u64,
        zero: EachAsValue<'a, Inner>,
    }

    fn inner(k: u64) -> Inner {
        Inner {
            zeta: 0.1 * k as f64,
            alpha: k.is_multiple_of(2).then_some(k as u32),
            by_count: HashMap::from([(9, "nine"), (10 + k, "ten"), (100, "hundred")]),
            empty: Vec::new(),
            nan: f64::NAN,
        }
    }

    #[test]
    fn prints_what_json_macro_and_to_vec_pretty_print() {
        let items: Vec<Inner> = (0..4).map(inner).collect();
        let one = inner(7);
        let through_value = serde_json::to_vec_pretty(&serde_json::json!({
            "zero": Vec::<Inner>::new(),
            "seed": 3,
            "one": one,
            "none": None::<Inner>,
            "items": items,
        }))
        .unwrap();
        let streamed = serde_json::to_vec_pretty(&Sorted {
            items: EachAsValue(&items),
            none: AsValue(&None),
            one: AsValue(&one),
            seed: 3,
            zero: EachAsValue(&[]),
        })
        .unwrap();
        assert_eq!(
            String::from_utf8(streamed).unwrap(),
            String::from_utf8(through_value).unwrap()
        );
    }

    #[test]
    fn the_file_holds_the_same_text() {
        let dir = std::env::temp_dir().join(format!("sorted-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.json");
        let items: Vec<Inner> = (0..3).map(inner).collect();
        write_pretty(&path, &EachAsValue(&items)).unwrap();
        let want = serde_json::to_vec_pretty(&serde_json::to_value(&items).unwrap()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
