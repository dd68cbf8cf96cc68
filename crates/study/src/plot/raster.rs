//! SVG to PNG with resvg: the PNG is the SVG's own rendering (same text positions, same font),
//! not a second drawing through another backend.
//!
//! Fonts: only the embedded DejaVu Sans (the font plotters laid the text out with) is loaded, and
//! every generic family resolves to it, so a PNG is byte-identical on every machine whatever
//! fonts it has installed.

use std::sync::{Arc, OnceLock};

use resvg::{tiny_skia, usvg};

/// The family name inside `assets/DejaVuSans.ttf`.
const FAMILY: &str = "DejaVu Sans";

fn fonts() -> Arc<usvg::fontdb::Database> {
    static DB: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = usvg::fontdb::Database::new();
        db.load_font_data(super::draw::FONT.to_vec());
        db.set_sans_serif_family(FAMILY);
        db.set_serif_family(FAMILY);
        db.set_monospace_family(FAMILY);
        Arc::new(db)
    })
    .clone()
}

/// Rasterizes `svg` at its own size on white; PNG bytes (RGBA).
pub(super) fn png(svg: &str) -> Result<Vec<u8>, String> {
    let opt = usvg::Options {
        font_family: FAMILY.into(),
        fontdb: fonts(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| format!("parsing the SVG: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| format!("an empty SVG ({}x{})", size.width(), size.height()))?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap
        .encode_png()
        .map_err(|e| format!("encoding the PNG: {e}"))
}
