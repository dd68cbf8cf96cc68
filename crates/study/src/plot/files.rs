//! A figure's three files ([`super`]'s essay, "Files"): the CSV of its numbers, the SVG that
//! [`super::draw`] draws and the PNG [`super::raster`] makes of that SVG. The drawing modules
//! read a [`Figure`]; the figure names none of them, so this is where it meets them.

use std::path::Path;

use super::{draw, raster, Figure};

impl Figure {
    /// Width and height in pixels: [`PLOT_SIZE_PX`](super::PLOT_SIZE_PX), wider when a categorical figure's bars
    /// would be thinner than a few pixels.
    pub fn size_px(&self) -> (u32, u32) {
        draw::size_px(self)
    }

    /// The plot as SVG text.
    pub fn svg(&self) -> Result<String, String> {
        draw::svg(self)
    }

    /// The plot as PNG bytes: the SVG rasterized by resvg.
    pub fn png(&self) -> Result<Vec<u8>, String> {
        raster::png(&self.svg()?).map_err(|e| format!("{}: {e}", self.stem))
    }

    /// Writes `<stem>.csv`, `<stem>.svg` and `<stem>.png` into `dir`; returns the PNG bytes.
    pub fn write(&self, dir: &Path) -> Result<Vec<u8>, String> {
        let w = |name: String, bytes: &[u8]| {
            std::fs::write(dir.join(&name), bytes).map_err(|e| format!("writing {name}: {e}"))
        };
        w(format!("{}.csv", self.stem), self.csv().as_bytes())?;
        let svg = self.svg()?;
        w(format!("{}.svg", self.stem), svg.as_bytes())?;
        let png = raster::png(&svg).map_err(|e| format!("{}: {e}", self.stem))?;
        w(format!("{}.png", self.stem), &png)?;
        Ok(png)
    }
}
