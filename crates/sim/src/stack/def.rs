//! The [`Stack`] type: what a named stack is made of. Its own file so that the families
//! (`stack/flashshare.rs`, `stack/fastdrain.rs`) and the lookup and merging in `stack/mod.rs`
//! all use it without the families depending on their parent.

/// A named set of switches.
#[derive(Debug)]
pub struct Stack {
    pub name: &'static str,
    /// The stack this one adds to (its settings come first).
    pub based_on: Option<&'static str>,
    /// One line: what it is.
    pub about: &'static str,
    /// `(key, TOML value)`: keys as a system file writes them, under `host.` or `device.`.
    pub sets: &'static [(&'static str, &'static str)],
}
