//! Input diagnostics: one message per problem, each pointing at file:line:col with the
//! offending source line underneath, the way compilers report errors.

use std::fmt;
use std::path::{Path, PathBuf};

/// A position in a spec file (1-based line and column, in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Mark {
    pub line: usize,
    pub col: usize,
}

/// One problem found in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    pub mark: Mark,
    /// Width of the offending text, for the underline (at least 1).
    pub width: usize,
    pub message: String,
    /// The source line the mark points into, when it is known: all of it, or for a long line
    /// [`SHOWN_LINE_CHARS`] characters around the mark, cut ends shown as `…`.
    pub source_line: Option<String>,
    /// The mark's column within `source_line` (1-based).
    pub source_col: usize,
}

/// Longest stretch of a source line shown under a message, in characters: a minified (or
/// hostile) one-line spec would otherwise be printed whole under each of its errors.
pub const SHOWN_LINE_CHARS: usize = 160;

/// The part of `line` shown around 1-based column `col`, and the column within it.
fn window(line: &str, col: usize) -> (String, usize) {
    let count = line.chars().count();
    if count <= SHOWN_LINE_CHARS {
        return (line.to_owned(), col);
    }
    let at = col.saturating_sub(1).min(count);
    // Some context before the mark, most of the window after it.
    let start = at.saturating_sub(SHOWN_LINE_CHARS / 4);
    let end = (start + SHOWN_LINE_CHARS).min(count);
    let mut text: String = line.chars().skip(start).take(end - start).collect();
    let mut shown_col = at - start + 1;
    if start > 0 {
        text.insert(0, '…');
        shown_col += 1;
    }
    if end < count {
        text.push('…');
    }
    (text, shown_col)
}

impl Diagnostic {
    pub fn new(file: &Path, mark: Mark, width: usize, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_path_buf(),
            mark,
            width: width.max(1),
            message: message.into(),
            source_line: None,
            source_col: mark.col,
        }
    }

    /// Attaches the line of `source` the mark points at, for display.
    pub fn with_source(mut self, source: &str) -> Self {
        if self.mark.line > 0 {
            if let Some(line) = source.lines().nth(self.mark.line - 1) {
                let (shown, col) = window(line, self.mark.col);
                self.source_line = Some(shown);
                self.source_col = col;
            }
        }
        self
    }

    /// `file:line:col`, the prefix editors and CI logs recognise.
    pub fn location(&self) -> String {
        format!(
            "{}:{}:{}",
            crate::escape::shown_path(&self.file),
            self.mark.line,
            self.mark.col
        )
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: error: {}", self.location(), self.message)?;
        if let Some(line) = &self.source_line {
            let gutter = self.mark.line.to_string();
            let pad = " ".repeat(gutter.len());
            // Tabs would shift the caret: show them as single spaces. Other characters that
            // show badly (a NUL, a terminal escape sequence, a bidi override, a line
            // separator) are shown as U+FFFD, never sent raw.
            let shown: String = line
                .chars()
                .map(|c| match c {
                    '\t' => ' ',
                    c if crate::escape::shows_badly(c) => '\u{fffd}',
                    c => c,
                })
                .collect();
            let lead = " ".repeat(self.source_col.saturating_sub(1));
            let width = self.width.min(
                shown
                    .chars()
                    .count()
                    .saturating_sub(self.source_col.saturating_sub(1))
                    .max(1),
            );
            write!(
                f,
                "\n{pad} |\n{gutter} | {shown}\n{pad} | {lead}{}",
                "^".repeat(width)
            )?;
        }
        Ok(())
    }
}

/// Every problem found in one run, sorted by file and position so output is stable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }
    pub fn sorted(mut self) -> Self {
        self.0
            .sort_by(|a, b| (&a.file, a.mark, &a.message).cmp(&(&b.file, b.mark, &b.message)));
        self.0.dedup();
        self
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            writeln!(f, "{d}")?;
        }
        let n = self.0.len();
        write!(f, "{n} error{} in the specs", if n == 1 { "" } else { "s" })
    }
}

/// ` (did you mean `x`?)` when exactly one candidate is a small typo away from `word`: at most
/// two edits (Levenshtein, in characters), and fewer than the shorter name's length.
pub fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    let close: Vec<&&str> = candidates
        .iter()
        .filter(|c| {
            let d = strsim::levenshtein(word, c);
            d <= 2 && d < c.len().min(word.len().max(1))
        })
        .collect();
    match close.as_slice() {
        [one] => format!(" (did you mean `{one}`?)"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_shown_around_the_mark_with_the_caret_under_it() {
        let line = format!("{}BAD{}", "a".repeat(5000), "b".repeat(5000));
        let d = Diagnostic::new(Path::new("x.yaml"), Mark { line: 1, col: 5001 }, 3, "bad")
            .with_source(&line);
        let text = d.to_string();
        assert!(text.starts_with("x.yaml:1:5001: error: bad"), "{text}");
        let shown: Vec<&str> = text.lines().collect();
        assert!(shown[2].chars().count() < SHOWN_LINE_CHARS + 10, "{text}");
        assert!(
            shown[2].contains("…aaa") && shown[2].ends_with("bbb…"),
            "{text}"
        );
        // The caret row's `^^^` sits under `BAD`.
        let at = shown[2].chars().position(|c| c == 'B').unwrap();
        assert_eq!(shown[3].chars().position(|c| c == '^'), Some(at), "{text}");
        assert_eq!(shown[3].matches('^').count(), 3);
        // A short line is shown whole, as before.
        let d = Diagnostic::new(Path::new("x.yaml"), Mark { line: 1, col: 4 }, 1, "bad")
            .with_source("ab x");
        assert!(d.to_string().ends_with("1 | ab x\n  |    ^"), "{d}");
    }

    #[test]
    fn one_close_candidate_is_suggested() {
        let keys = ["block", "items", "stages", "epilogue"];
        assert_eq!(did_you_mean("blok", &keys), " (did you mean `block`?)");
        assert_eq!(did_you_mean("epilog", &keys), " (did you mean `epilogue`?)");
        assert_eq!(did_you_mean("warp_m", &keys), "");
        // Two equally close candidates: no guess.
        assert_eq!(did_you_mean("ab", &["aa", "bb"]), "");
        // A one-letter word is never "close" to a one-letter key.
        assert_eq!(did_you_mean("x", &["y"]), "");
    }
}
