//! The results section of docs/benchmarks.md: the block between two markers that a full
//! run rewrites, and the checks that keep the document to exactly one such block.
//!
//! The bench target has `harness = false`, so `#[test]` functions would never run; the
//! tests of this module are [`self_test`], which every run calls before measuring (a smoke
//! run and `--self-test` also check the repository's docs/benchmarks.md, a run with
//! `--docs FILE` checks FILE).

use std::path::Path;

pub const BEGIN: &str = "<!-- BEGIN RESULTS (written by benches/scenarios, do not edit) -->";
pub const END: &str = "<!-- END RESULTS -->";

/// The repository's benchmark document.
pub fn repo_doc() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/benchmarks.md"))
}

/// `text` with the lines between its one BEGIN marker and its one END marker replaced by
/// `tables`. Everything outside the markers is kept byte for byte. A document with no
/// block, with markers out of order, or with more than one block (a copied section) is
/// refused: rewriting only one of two blocks would leave the other stale and hide the copy.
pub fn splice(text: &str, tables: &str) -> Result<String, String> {
    let begins = text.matches(BEGIN).count();
    let ends = text.matches(END).count();
    if begins != 1 || ends != 1 {
        return Err(format!(
            "expected exactly one results block, found {begins} {BEGIN:?} and {ends} {END:?} \
             markers (is a section of the document copied?)"
        ));
    }
    let (Some(begin), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        unreachable!("both markers were counted once");
    };
    let start = begin + BEGIN.len();
    if end < start {
        return Err(format!("{END:?} comes before {BEGIN:?}"));
    }
    Ok(format!(
        "{}\n{}\n{}",
        &text[..start],
        tables.trim_end(),
        &text[end..]
    ))
}

/// Rewrites the results block of the document at `path`.
pub fn write(path: &Path, tables: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    std::fs::write(path, splice(&text, tables)?).map_err(|e| e.to_string())
}

/// The unit tests of [`splice`]; `Err` names the first that failed.
pub fn self_test() -> Result<(), String> {
    fn expect(what: &str, ok: bool) -> Result<(), String> {
        ok.then_some(())
            .ok_or_else(|| format!("results_doc self-test: {what}"))
    }
    let doc = format!("# T\n\n## Results\n\n{BEGIN}\nold\n{END}\n\n## Plots\n\nprose\n");

    let once = splice(&doc, "new 1\n\n")?;
    expect(
        "the block is replaced and the rest kept",
        once == format!("# T\n\n## Results\n\n{BEGIN}\nnew 1\n{END}\n\n## Plots\n\nprose\n"),
    )?;
    let twice = splice(&once, "new 2")?;
    expect(
        "a second run rewrites the same block, adding nothing",
        twice == format!("# T\n\n## Results\n\n{BEGIN}\nnew 2\n{END}\n\n## Plots\n\nprose\n"),
    )?;
    expect(
        "the same tables twice give the same document",
        splice(&once, "new 1")? == once,
    )?;

    // What docs/benchmarks.md looked like when its Machine, Results, Plots and Reading
    // sections had been pasted a second time: the writer must not pick one copy.
    let copied = format!("{doc}\n## Machine\n\n## Results\n\n{BEGIN}\nold\n{END}\n");
    expect(
        "a document with two results blocks is refused",
        splice(&copied, "new").is_err(),
    )?;
    expect(
        "a document without markers is refused",
        splice("# T\n", "new").is_err(),
    )?;
    expect(
        "markers out of order are refused",
        splice(&format!("{END}\n{BEGIN}\n"), "new").is_err(),
    )?;
    expect(
        "a second END marker after the block is refused",
        splice(&format!("{doc}{END}\n"), "new").is_err(),
    )?;
    Ok(())
}

/// `self_test`, then that the document at `doc` (if any) has exactly one results block, so
/// that a run which is to rewrite it, or a smoke run checking the repository's, fails at once.
pub fn check(doc: Option<&Path>) -> Result<(), String> {
    self_test()?;
    if let Some(path) = doc {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        splice(&text, "").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
