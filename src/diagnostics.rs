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
    /// The source line the mark points into, when it is known.
    pub source_line: Option<String>,
}

impl Diagnostic {
    pub fn new(file: &Path, mark: Mark, width: usize, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_path_buf(),
            mark,
            width: width.max(1),
            message: message.into(),
            source_line: None,
        }
    }

    /// Attaches the line of `source` the mark points at, for display.
    pub fn with_source(mut self, source: &str) -> Self {
        if self.mark.line > 0 {
            self.source_line = source.lines().nth(self.mark.line - 1).map(str::to_owned);
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
            let lead = " ".repeat(self.mark.col.saturating_sub(1));
            let width = self.width.min(
                shown
                    .chars()
                    .count()
                    .saturating_sub(self.mark.col.saturating_sub(1))
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
    use super::did_you_mean;

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
