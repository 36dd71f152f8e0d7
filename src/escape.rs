//! The one way text from outside (specs, paths, bundles) reaches generated Rust or CUDA C or
//! a message: names are checked against the spec's identifier rule, free text is escaped so
//! that it cannot end the comment or string it is placed in.
//!
//! Escaping is visible and a no-op on ordinary text: a newline becomes `\n`, a backslash
//! `\\`, any other control character, line or paragraph separator, bidirectional override or
//! invisible format character `\u{..}`; everything else, non-ASCII letters included, is kept.

use std::borrow::Cow;

/// How long a name may be and whether it may hold `__`.
#[derive(Debug, Clone, Copy)]
pub struct NameRule {
    pub max_len: usize,
    pub double_underscore: bool,
}

/// A spec's kernel name: lowercase letters, digits and single underscores, starting with a
/// letter, at most 64 characters. Names become C symbols, Rust identifiers and file names.
pub const SPEC_NAME: NameRule = NameRule {
    max_len: 64,
    double_underscore: false,
};

/// A name derived from a spec name (an instance: the kernel name, then its dtype and
/// parameters) or chosen by tilegen (an argument): the same alphabet, longer, and `__` where
/// a kernel name ends with `_`.
pub const DERIVED_NAME: NameRule = NameRule {
    max_len: 200,
    double_underscore: true,
};

/// Rust keywords (strict, reserved and edition-dependent), which no name may be: the
/// bindings use names as identifiers, and `self`, `super` or `crate` cannot even be raw.
pub const RUST_KEYWORDS: &[&str] = &[
    "abstract",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "const",
    "continue",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "macro_rules",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "pub",
    "raw",
    "ref",
    "return",
    "safe",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "union",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
];

/// Why `s` is not a name under `rule` (phrased to follow "it is not a plain identifier"),
/// or None when it is one. The spec checks kernel names with [`SPEC_NAME`].
pub fn name_problem(s: &str, rule: NameRule) -> Option<String> {
    if s.is_empty() {
        return Some("it is empty".into());
    }
    let bad_char = s
        .chars()
        .find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
    if let Some(c) = bad_char {
        Some(match c {
            ' ' => "it contains a space".to_string(),
            c if c.is_uppercase() => format!("it contains the uppercase letter `{c}`"),
            c => format!("it contains `{}`", shown(&c.to_string())),
        })
    } else if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some("it does not start with a letter".to_string())
    } else if !rule.double_underscore && s.contains("__") {
        Some("it contains `__`".to_string())
    } else if s.chars().count() > rule.max_len {
        Some(format!("it is {} characters long", s.chars().count()))
    } else {
        None
    }
}

/// [`name_problem`], and a name must not be a Rust keyword.
pub fn rust_name_problem(s: &str, rule: NameRule) -> Option<String> {
    name_problem(s, rule).or_else(|| {
        RUST_KEYWORDS
            .contains(&s)
            .then(|| format!("`{s}` is a Rust keyword"))
    })
}

/// What a rule asks for, for messages.
pub fn name_rule_text(rule: NameRule) -> String {
    format!(
        "use lowercase letters, digits and {}underscores, starting with a letter, at most {} characters",
        if rule.double_underscore { "" } else { "single " },
        rule.max_len
    )
}

/// Whether `c` must be escaped: it could end a line (in Rust, C, or an editor), reorder or
/// hide the text around it, or it is the escape character itself.
fn needs_escape(c: char) -> bool {
    c == '\\' || shows_badly(c)
}

/// Whether `c` could end a line, move a terminal's cursor, or reorder or hide text.
pub(crate) fn shows_badly(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}'                  // line and paragraph separators
                | '\u{061c}' | '\u{200e}' | '\u{200f}' // bidi marks
                | '\u{202a}'..='\u{202e}'            // bidi embeddings and overrides
                | '\u{2066}'..='\u{2069}'            // bidi isolates
                | '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' // invisible
                | '\u{00ad}' | '\u{034f}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
                | '\u{180b}'..='\u{180f}' | '\u{2061}'..='\u{2064}' | '\u{3164}'
                | '\u{206a}'..='\u{206f}' | '\u{ffa0}' | '\u{fff9}'..='\u{fffb}'
                | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}' // more that show nothing
        )
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
    }
}

/// `s` made safe for the inside of a `//` comment (Rust or C) or a doc comment: nothing in
/// it can end the line, so the comment ends where the generator ends it. Unchanged (and
/// borrowed) when nothing needs escaping.
pub fn comment(s: &str) -> Cow<'_, str> {
    escape_where(s, needs_escape)
}

/// `s` for a message: [`comment`]'s escaping except for backslashes (a message is read, not
/// parsed), so that hostile names print as what they are instead of moving the cursor or
/// splitting the line.
pub fn shown(s: &str) -> Cow<'_, str> {
    escape_where(s, shows_badly)
}

/// `s` with every character for which `escape` holds written as an escape; borrowed when
/// there is none.
fn escape_where(s: &str, escape: fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if escape(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` as plain text inside generated documentation (rustdoc's Markdown): each character
/// Markdown or HTML could read as markup becomes an HTML character reference, so that text
/// from outside (a tuning table's device name) can neither hide nor format anything. Doc
/// lines then go through [`comment`], which escapes what could end the line or show nothing
/// (a backslash escape would be doubled there, so it is not one here).
pub fn doc_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '|' | '~' | '!' | '&' => {
                out.push_str(&format!("&#{};", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// A path as messages show it: [`shown`] of its text, so that a file name from outside (a
/// spec's, a bundle's) cannot forge a line of output or move the terminal's cursor.
pub fn shown_path(p: &std::path::Path) -> String {
    shown(&p.to_string_lossy()).into_owned()
}

/// At most `max` characters of `s` for a message (never split inside a character), escaped,
/// with `…` when cut.
pub fn shown_prefix(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", shown(&s[..i])),
        None => shown(s).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_text_is_unchanged() {
        for s in [
            "elementwise.yaml",
            "sub dir/ünïcode × ≤ ².yml",
            "gemm_bf16_128x128x32_w64x64_s3_nn",
            "",
        ] {
            assert!(matches!(comment(s), Cow::Borrowed(_)), "{s}");
        }
    }

    #[test]
    fn nothing_can_end_a_comment_line() {
        let hostile = "x\npub fn injected() {}\r\n//\u{2028}\u{2029}\u{85}\u{b}\u{c}\0\u{202e}\\";
        let c = comment(hostile);
        assert!(!c.chars().any(needs_escape_except_backslash), "{c}");
        assert_eq!(
            c,
            "x\\npub fn injected() {}\\r\\n//\\u{2028}\\u{2029}\\u{85}\\u{b}\\u{c}\\u{0}\\u{202e}\\\\"
        );
        // Nothing that Rust, C or Unicode treat as a line break survives.
        assert_eq!(c.lines().count(), 1);
        assert!(!c.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}', '\u{b}', '\u{c}']));
    }

    fn needs_escape_except_backslash(c: char) -> bool {
        c != '\\' && needs_escape(c)
    }

    #[test]
    fn shown_prefix_never_splits_a_character() {
        let s = "é".repeat(700);
        let p = shown_prefix(&s, 64);
        assert_eq!(p.chars().count(), 65);
        assert!(p.ends_with('…'));
        assert_eq!(shown_prefix("a\nb", 10), "a\\nb");
        assert_eq!(shown("a\\b\0"), "a\\b\\u{0}");
    }

    #[test]
    fn names_follow_the_spec_rule() {
        for ok in ["a", "bias_gelu", "x2", "vector_add_f32_b256_i4"] {
            assert_eq!(name_problem(ok, SPEC_NAME), None, "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("a b", "a space"),
            ("Ab", "uppercase"),
            ("1a", "does not start with a letter"),
            ("_a", "does not start with a letter"),
            ("a__b", "`__`"),
            ("a-b", "contains `-`"),
            ("a\nb", "contains `\\n`"),
        ] {
            let p = name_problem(bad, SPEC_NAME).unwrap_or_default();
            assert!(p.contains(why), "{bad:?}: {p}");
        }
        assert!(name_problem(&"a".repeat(65), SPEC_NAME).is_some());
        assert_eq!(name_problem("foo__f32", DERIVED_NAME), None);
        assert!(rust_name_problem("self", DERIVED_NAME)
            .unwrap()
            .contains("keyword"));
        assert!(rust_name_problem("type", DERIVED_NAME).is_some());
        assert_eq!(rust_name_problem("types", DERIVED_NAME), None);
        // Every accepted name is a Rust identifier.
        for ok in ["a", "foo__f32", "r", "gen_x"] {
            assert!(rust_name_problem(ok, DERIVED_NAME).is_none());
            syn::parse_str::<syn::Ident>(ok).unwrap();
        }
    }

    /// The spec parser and [`name_problem`] accept and refuse the same kernel names.
    #[test]
    fn spec_parser_agrees_with_the_rule() {
        let names = [
            "ok",
            "k2",
            "a_b_c",
            "ends_",
            "a b",
            "Upper",
            "9lives",
            "_lead",
            "dbl__under",
            "dash-ed",
            "tab\there",
            "ünï",
            &"n".repeat(64),
            &"n".repeat(65),
        ];
        for name in names {
            let text = format!(
                "kernels:\n  - name: {}\n    op: vector_add\n    dtype: f32\n",
                serde_json::to_string(name).unwrap()
            );
            let src = crate::spec::SpecSource {
                path: "t.yaml".into(),
                rel: "t.yaml".into(),
                text,
            };
            let spec_ok = crate::spec::load(&[src]).is_ok();
            assert_eq!(
                spec_ok,
                name_problem(name, SPEC_NAME).is_none(),
                "spec and rule disagree on {name:?}"
            );
        }
    }
}
