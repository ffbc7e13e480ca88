//! The TrueType font the plots' text is drawn with, found and registered at run time.
//!
//! plotters' `ab_glyph` text needs a font registered before the first chart, and none is
//! built in: a font file of a few hundred kilobytes does not belong in every binary that
//! plots, and the machines these tools run on have one (Debian's `fonts-dejavu-core`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::style::FontStyle;

/// The environment variable naming a `.ttf` file for the plots' text, read first
/// (`quorumlock bench --plot` documents it).
pub const FONT_ENV: &str = "QUORUMLOCK_FONT";

/// The same for the repository's benchmark harness, read second, so that a setting made
/// for either program serves both.
pub const BENCH_FONT_ENV: &str = "QUORUMLOCK_BENCH_FONT";

/// Where systems keep a usable font (DejaVu Sans or Liberation Sans on Linux, Arial on
/// macOS), tried in this order after the environment variables.
pub const SYSTEM_FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// The family name the plots ask plotters for.
pub(super) const FAMILY: &str = "sans-serif";

/// The font registered so far in this process.
static REGISTERED: OnceLock<PathBuf> = OnceLock::new();

/// No usable font was found for the plots' text.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "no TrueType font found for the plot's text: set {FONT_ENV} (or {BENCH_FONT_ENV}) to a \
     .ttf file, or install one (Debian: apt-get install fonts-dejavu-core)"
)]
pub struct FontNotFound {
    tried: Vec<PathBuf>,
}

impl FontNotFound {
    /// The files tried, in order: those the environment variables name, then
    /// [`SYSTEM_FONTS`].
    pub fn tried(&self) -> &[PathBuf] {
        &self.tried
    }
}

/// Registers a font for the plots' text and returns its file: the file `$QUORUMLOCK_FONT`
/// names, else the one `$QUORUMLOCK_BENCH_FONT` names, else the first of
/// [`SYSTEM_FONTS`] that reads as a font.
///
/// Once one is registered, later calls return it without looking again; the plotting
/// functions call this themselves, so calling it first only serves to fail before a run
/// rather than after it.
pub fn register_font() -> Result<PathBuf, FontNotFound> {
    if let Some(path) = REGISTERED.get() {
        return Ok(path.clone());
    }
    let from_env = [FONT_ENV, BENCH_FONT_ENV]
        .into_iter()
        .filter_map(std::env::var_os)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    let candidates: Vec<PathBuf> = from_env
        .chain(SYSTEM_FONTS.iter().map(PathBuf::from))
        .collect();
    for path in &candidates {
        if register(path) {
            return Ok(REGISTERED.get_or_init(|| path.clone()).clone());
        }
    }
    Err(FontNotFound { tried: candidates })
}

/// Whether `path` could be read and registered as the plots' font.
fn register(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    // plotters keeps the font's bytes for the life of the program; one font per process
    // is leaked, as registering happens once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes).is_ok()
}
