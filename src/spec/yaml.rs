//! YAML with positions. Specs are parsed by granit-parser, the event parser of serde-saphyr
//! (depended on directly: serde-saphyr's deserializer layer is not used), into a tree of nodes
//! that remember where they came from, so every validation error can name file:line:col.
//! The tree builder also enforces what a spec needs beyond syntax, each at the offending
//! text: one document per file, no duplicate keys, no tags, bounded nesting and bounded
//! alias expansion (alias bombs), per file and across every file of a run.

use std::collections::HashMap;

use granit_parser::{
    ErrorKind, Event, Marker, Options, Parser, ScalarStyle, ScanError, Span, StructureStyle, Tag,
};

use crate::diagnostics::Mark;

/// Upper bound on nodes produced while expanding aliases: a defence against alias bombs.
/// Each [`TEXT_PER_NODE`] bytes of a scalar's text count as one node more, so that aliases of
/// long strings are held to the same bound in bytes.
const MAX_NODES: usize = 100_000;
/// Bytes of scalar text that count as one node (see [`MAX_NODES`]).
const TEXT_PER_NODE: usize = 64;
/// The same bound for all files of a run together: many small files, each just under
/// `MAX_NODES`, must not add up to minutes of copying.
pub const MAX_NODES_PER_RUN: usize = 250_000;
/// Specs are small; anything deeper than this is not a spec.
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// The scalar's text, and whether it was quoted (a quoted `"1"` is a string, not a number).
    Scalar(String, bool),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub mark: Mark,
    /// Characters of source this node's text spans (for underlines); 1 for collections, 0 for
    /// a value left empty (`key:` with nothing after it).
    pub width: usize,
}

impl Node {
    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(s, _) => Some(s),
            _ => None,
        }
    }
    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }
    /// Short description of the node's kind for "expected X, found Y" messages.
    pub fn kind(&self) -> &'static str {
        match &self.value {
            Value::Null => "an empty value",
            Value::Scalar(..) => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
    /// Looks a key up in a mapping node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }
}

/// A parse failure with its position.
#[derive(Debug, Clone)]
pub struct ParseError {
    pub mark: Mark,
    /// Characters to underline (at least 1).
    pub width: usize,
    /// The whole message (`invalid YAML: ...` for what YAML itself forbids).
    pub message: String,
}

/// Parses one YAML document. An empty document yields `Ok(None)`.
pub fn parse(source: &str) -> Result<Option<Node>, ParseError> {
    parse_within(source, &mut MAX_NODES_PER_RUN.clone())
}

/// Like [`parse`], spending nodes from `budget` (what is left of a run's
/// `MAX_NODES_PER_RUN`).
pub fn parse_within(source: &str, budget: &mut usize) -> Result<Option<Node>, ParseError> {
    parse_document(source, budget).map_err(|mut e| {
        // An error past the last line (an unclosed bracket) has no source line to show.
        if e.mark.line > source.lines().count() {
            e.message += " at the end of the file";
        }
        e
    })
}

/// A syntax error: one YAML forbids.
fn invalid(mark: Mark, message: impl std::fmt::Display) -> ParseError {
    ParseError {
        mark,
        width: 1,
        message: format!("invalid YAML: {message}"),
    }
}

fn parse_document(source: &str, budget: &mut usize) -> Result<Option<Node>, ParseError> {
    if let Some(e) = bad_character(source) {
        return Err(e);
    }
    let mut options = Options::default();
    // A node for every unknown alias, so the message can name it and point at it.
    options.emit_unresolved_aliases = true;
    options.set_emit_comments(false);
    let mut builder = TreeBuilder {
        source,
        budget: *budget,
        ..TreeBuilder::default()
    };
    let mut parser = Parser::new_from_str_with_options(source, options);
    let mut parse_error = None;
    // The builder stops at its first error: the parser is not asked for more events, so a
    // second document or an alias bomb costs nothing past the point it is found.
    while builder.error.is_none() {
        match parser.next_event() {
            None => break,
            Some(Ok((event, span))) => builder.on_event(event, &span),
            Some(Err(e)) => {
                parse_error = Some(e);
                break;
            }
        }
    }
    *budget = budget.saturating_sub(builder.nodes);
    if let Some(err) = builder.error {
        return Err(err);
    }
    if let Some(e) = parse_error {
        return Err(builder.syntax_error(&e));
    }
    Ok(builder.root)
}

/// The first character YAML does not allow in a stream (C0 and C1 controls other than tab
/// and line breaks, DEL, surrogates, U+FFFE/U+FFFF), at its line and column and named, since
/// it may well be invisible. Such a character inside a name would reach generated code.
fn bad_character(source: &str) -> Option<ParseError> {
    let (offset, c) = source.char_indices().find(|&(_, c)| {
        !matches!(c,
            '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}'
            | '\u{e000}'..='\u{fffd}' | '\u{10000}'..='\u{10ffff}')
    })?;
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some(invalid(
        Mark { line, col },
        format!(
            "control characters are not allowed (found U+{:04X})",
            c as u32
        ),
    ))
}

/// The first tab from `m` to the end of the next line: the parser may report a tab
/// where the scalar before it started.
fn tab_after(source: &str, m: &Marker) -> Option<Mark> {
    let start = m
        .byte_offset()
        .or_else(|| source.char_indices().nth(m.index()).map(|(b, _)| b))?;
    let rest = source.get(start..)?;
    let at = start + rest.find('\t')?;
    let before = &source[..at];
    let line = before.matches('\n').count() + 1;
    (line <= m.line() + 1).then(|| Mark {
        line,
        col: before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1,
    })
}

fn to_mark(m: &Marker) -> Mark {
    // granit-parser lines are 1-based and columns 0-based.
    Mark {
        line: m.line(),
        col: m.col() + 1,
    }
}

enum Open {
    Seq(Node, usize, StructureStyle),
    /// The mapping, its entries, a key awaiting its value, the anchor, the style, and where
    /// each scalar key was first given (for duplicates, without a search per key).
    Map(
        Node,
        Vec<(Node, Node)>,
        Option<Node>,
        usize,
        StructureStyle,
        HashMap<String, Mark>,
    ),
}

#[derive(Default)]
struct TreeBuilder<'s> {
    source: &'s str,
    stack: Vec<Open>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    nodes: usize,
    /// Nodes left to this run, this file's included.
    budget: usize,
    documents: usize,
    error: Option<ParseError>,
}

impl TreeBuilder<'_> {
    fn fail(&mut self, mark: Mark, message: String) {
        if self.error.is_none() {
            self.error = Some(invalid(mark, message));
        }
    }

    /// The parser's error, told with the collection it was in and where that began
    /// (`did not find expected ',' or ']' (while parsing a flow sequence that starts at
    /// 4:12)`), and a hint for the two usual causes: tabs and indentation.
    fn syntax_error(&self, e: &ScanError) -> ParseError {
        let info = e.info();
        let mut mark = to_mark(e.marker());
        let open = self.stack.last().map(|o| match o {
            Open::Seq(n, _, StructureStyle::Flow) => ("a flow sequence", n.mark, Some(']')),
            Open::Seq(n, _, StructureStyle::Block) => ("a block sequence", n.mark, None),
            Open::Map(n, entries, _, _, style, _) => {
                // Like a finished mapping, an open one starts at its first key.
                let at = entries.first().map_or(n.mark, |(k, _)| n.mark.min(k.mark));
                match style {
                    StructureStyle::Flow => ("a flow mapping", at, Some('}')),
                    StructureStyle::Block => ("a block mapping", at, None),
                }
            }
        });
        let mut message = match info.split_once(", ") {
            Some((context, rest)) if context.starts_with("while parsing a") => {
                match rest.strip_prefix("expected ") {
                    Some(what) => format!("did not find expected {what}"),
                    None => rest.to_string(),
                }
            }
            _ => info.clone(),
        };
        if let Some((_, at, Some(close))) = open {
            // A `key:` on a later line inside `[...]`: the bracket was left open.
            if at.line < mark.line
                && matches!(
                    e.kind(),
                    ErrorKind::InvalidColonPlacement | ErrorKind::MappingValueNotAllowed
                )
            {
                message = format!("did not find expected ',' or '{close}'");
            }
        }
        let tab = info.contains("tab");
        if tab {
            // The parser may stop where the scalar before the tab ends; point at the tab.
            if let Some(m) = tab_after(self.source, e.marker()) {
                mark = m;
            }
            message = "found a tab character where YAML expects indentation or a value".into();
        }
        let recursion = info.contains("recursion limit");
        if matches!(e.kind(), ErrorKind::UnclosedFlowCollection { .. }) {
            message += ": nothing closes it before the end of the file";
        }
        // Past the recursion limit the parser is ahead of the tree, whose innermost
        // collection would be the wrong one to name.
        if let Some((what, at, _)) = open.filter(|o| o.1 != mark && !recursion) {
            message += &format!(
                " (while parsing {what} that starts at {}:{})",
                at.line, at.col
            );
        }
        if recursion {
            message += &format!("; a spec nests a handful of levels, at most {MAX_DEPTH}");
        } else if tab {
            message += "; YAML indents with spaces only";
        } else if matches!(
            e.kind(),
            ErrorKind::InvalidIndentation
                | ErrorKind::InvalidFlowScalarIndent
                | ErrorKind::InvalidQuotedScalarIndent
                | ErrorKind::InvalidBlockScalarIndent
        ) || (open.is_some_and(|(what, ..)| what.contains("block"))
            && matches!(
                e.kind(),
                ErrorKind::ExpectedBlockMappingKey
                    | ErrorKind::ExpectedBlockSequenceEntry
                    | ErrorKind::SimpleKeyExpected
                    | ErrorKind::InvalidSimpleKey
                    | ErrorKind::MappingValueNotAllowed
                    | ErrorKind::MappingKeyNotAllowed
                    | ErrorKind::BlockSequenceEntryNotAllowed
                    | ErrorKind::UnexpectedEofBlockMapping
                    | ErrorKind::UnexpectedEofBlockSequence
            ))
        {
            // What the parser says when a line is indented too far or not far enough.
            message += "; check the indentation";
        }
        invalid(mark, message)
    }

    fn count(&mut self, n: usize, mark: Mark) -> bool {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            self.fail(
                mark,
                format!(
                    "document expands to more than {MAX_NODES} nodes here (an alias bomb?; \
                     {TEXT_PER_NODE} bytes of text count as a node); a spec has no use for that many"
                ),
            );
            return false;
        }
        if self.nodes > self.budget {
            self.fail(
                mark,
                format!(
                    "the spec files expand to more than {MAX_NODES_PER_RUN} nodes in all by here \
                     (alias bombs?); specs have no use for that many, and files after this one \
                     are not read"
                ),
            );
            return false;
        }
        true
    }

    /// Refuses a tagged node (`!!str 256`): a tag would change what a value means (a quoted
    /// `"256"` is text, a tagged one would be too), and specs need none. Returns whether
    /// the node is untagged.
    fn untagged(&mut self, tag: Option<&Tag>, span: &Span) -> bool {
        let Some(tag) = tag else { return true };
        // The tag as written, underlined where it is written.
        let (mark, width, written) = match span.tag_span() {
            Some(t) => {
                let text = t
                    .start
                    .byte_offset()
                    .zip(t.end.byte_offset())
                    .and_then(|(a, b)| self.source.get(a..b))
                    .filter(|s| s.starts_with('!'))
                    .map_or_else(|| tag.original(), str::to_string);
                (to_mark(&t.start), text.chars().count().max(1), text)
            }
            None => (
                span.tag_start()
                    .map_or_else(|| to_mark(&span.start), |m| to_mark(&m)),
                1,
                tag.original(),
            ),
        };
        if self.error.is_none() {
            self.error = Some(ParseError {
                mark,
                width,
                message: format!(
                    "YAML tag `{}` is not supported in a spec: write values plainly \
                     (a number as `256`, a name as `f32`), without tags",
                    written.escape_debug()
                ),
            });
        }
        false
    }

    fn open(&mut self, open: Open, mark: Mark) {
        if self.stack.len() >= MAX_DEPTH {
            return self.fail(
                mark,
                format!("document nests more than {MAX_DEPTH} levels deep; a spec needs a handful"),
            );
        }
        self.stack.push(open);
    }

    fn finish(&mut self, mut node: Node, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        let mut duplicate = None;
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open::Seq(seq, ..)) => {
                if let Value::Seq(items) = &mut seq.value {
                    items.push(node);
                }
            }
            Some(Open::Map(_, entries, pending, _, _, keys)) => match pending.take() {
                None => {
                    // A key. Two equal keys in one mapping are an error (YAML says so, and
                    // silently keeping either would hide a mistake).
                    if let Value::Scalar(text, _) = &node.value {
                        match keys.get(text) {
                            Some(first) => duplicate = Some((node.mark, text.clone(), *first)),
                            None => {
                                keys.insert(text.clone(), node.mark);
                            }
                        }
                    }
                    *pending = Some(node);
                }
                Some(key) => {
                    // `key:` with nothing after it: the parser places the empty value at the
                    // next token, often on a later line; put it right after its key instead.
                    if node.width == 0 && key.mark.line > 0 {
                        node.mark = Mark {
                            line: key.mark.line,
                            col: key.mark.col + key.width,
                        };
                    }
                    entries.push((key, node));
                }
            },
        }
        if let Some((mark, key, first)) = duplicate {
            self.fail(
                mark,
                format!(
                    "duplicate key `{}` (first given at {}:{}); each key may appear once per mapping",
                    key.escape_debug(),
                    first.line,
                    first.col
                ),
            );
        }
    }

    fn on_event(&mut self, ev: Event<'_>, span: &Span) {
        let mark = to_mark(&span.start);
        match ev {
            Event::DocumentStart(..) => {
                self.documents += 1;
                if self.documents > 1 {
                    self.fail(
                        mark,
                        "a second YAML document starts here; a spec file holds one document \
                         (remove the `---`, or put the second one in its own file)"
                            .into(),
                    );
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                if !self.untagged(tag.as_deref(), span) || !self.count(text_nodes(&text), mark) {
                    return;
                }
                let quoted = !matches!(style, ScalarStyle::Plain);
                let width = text.chars().count() + if quoted { 2 } else { 0 };
                let value =
                    if !quoted && matches!(text.as_ref(), "" | "~" | "null" | "Null" | "NULL") {
                        Value::Null
                    } else {
                        Value::Scalar(text.into_owned(), quoted)
                    };
                self.finish(Node { value, mark, width }, anchor);
            }
            Event::SequenceStart(style, anchor, tag) => {
                if !self.untagged(tag.as_deref(), span) {
                    return;
                }
                let node = Node {
                    value: Value::Seq(Vec::new()),
                    mark,
                    width: 1,
                };
                self.open(Open::Seq(node, anchor, style), mark);
            }
            Event::MappingStart(style, anchor, tag) => {
                if !self.untagged(tag.as_deref(), span) {
                    return;
                }
                let node = Node {
                    value: Value::Null,
                    mark,
                    width: 1,
                };
                self.open(
                    Open::Map(node, Vec::new(), None, anchor, style, HashMap::new()),
                    mark,
                );
            }
            Event::SequenceEnd => {
                if let Some(Open::Seq(node, anchor, _)) = self.stack.pop() {
                    self.finish(node, anchor);
                }
            }
            Event::MappingEnd => {
                if let Some(Open::Map(mut node, entries, _, anchor, _, _)) = self.stack.pop() {
                    // The parser may mark a block mapping after its first key; the mapping
                    // starts at its first key (a flow mapping's `{` comes first and stays).
                    if let Some((first_key, _)) = entries.first() {
                        node.mark = node.mark.min(first_key.mark);
                    }
                    node.value = Value::Map(entries);
                    self.finish(node, anchor);
                }
            }
            Event::Alias(id) => {
                let Some(size) = self.anchors.get(&id).map(node_count) else {
                    return self.fail(mark, "alias to an unknown anchor".into());
                };
                // Count before copying, so a bomb is stopped before it is built.
                if self.count(size, mark) {
                    let mut node = self.anchors[&id].clone();
                    node.mark = mark;
                    self.finish(node, 0);
                }
            }
            Event::UnresolvedAlias(name) => self.fail(
                mark,
                format!(
                    "alias `*{name}` refers to no anchor; define `&{name}` on a value before it"
                ),
            ),
            _ => {}
        }
    }
}

/// What a scalar of `text` counts against [`MAX_NODES`].
fn text_nodes(text: &str) -> usize {
    1 + text.len() / TEXT_PER_NODE
}

fn node_count(n: &Node) -> usize {
    match &n.value {
        Value::Scalar(text, _) => text_nodes(text),
        Value::Seq(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        Value::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| node_count(k) + node_count(v))
                .sum::<usize>()
        }
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() {
        let root = parse("a: 1\nb:\n  - x\n  - \"y\"\n").unwrap().unwrap();
        let a = root.get("a").unwrap();
        assert_eq!(a.mark, Mark { line: 1, col: 4 });
        let b = root.get("b").unwrap().as_seq().unwrap();
        assert_eq!(b[1].mark, Mark { line: 4, col: 5 });
        assert_eq!(b[1].value, Value::Scalar("y".into(), true));
    }

    #[test]
    fn empty_document_is_none() {
        assert!(parse("").unwrap().is_none());
        assert!(parse("# only a comment\n").unwrap().is_none());
    }

    #[test]
    fn syntax_error_has_position() {
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.mark.line >= 1, "{e:?}");
    }

    #[test]
    fn mappings_start_at_their_first_key() {
        let root = parse("k:\n  - name: a\n    op: b\n").unwrap().unwrap();
        assert_eq!(root.mark, Mark { line: 1, col: 1 });
        let entry = &root.get("k").unwrap().as_seq().unwrap()[0];
        assert_eq!(entry.mark, Mark { line: 2, col: 5 });
    }

    #[test]
    fn empty_value_sits_after_its_key() {
        let root = parse("a:\nb: 1\n").unwrap().unwrap();
        let a = root.get("a").unwrap();
        assert!(a.is_null());
        assert_eq!(a.mark, Mark { line: 1, col: 2 });
    }

    #[test]
    fn duplicate_keys_point_at_the_second() {
        let e = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(e.mark, Mark { line: 3, col: 1 });
        assert!(e.message.contains("duplicate key `a`"), "{e:?}");
    }

    #[test]
    fn second_document_is_an_error_at_its_start() {
        let e = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(e.mark, Mark { line: 2, col: 1 });
    }

    #[test]
    fn huge_numbers_stay_text_for_validation() {
        let root = parse("a: 99999999999999999999999999999\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            root.get("a").unwrap().as_str(),
            Some("99999999999999999999999999999")
        );
    }

    #[test]
    fn alias_bombs_stop_at_the_node_limit() {
        let mut doc = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (prev, name) in ["a", "b", "c", "d", "e", "f"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g"])
        {
            doc += &format!(
                "{name}: &{name} [{}]\n",
                vec![format!("*{prev}"); 10].join(", ")
            );
        }
        let e = parse(&doc).unwrap_err();
        assert!(e.message.contains("alias bomb"), "{e:?}");
    }

    #[test]
    fn aliases_of_long_text_count_its_bytes() {
        // Ten copies of a 400 KB string, ten of those, ...: gigabytes if each counted as one
        // node.
        let mut doc = format!("a: &a \"{}\"\n", "x".repeat(400_000));
        for (prev, name) in ["a", "b", "c", "d"].iter().zip(["b", "c", "d", "e"]) {
            doc += &format!(
                "{name}: &{name} [{}]\n",
                vec![format!("*{prev}"); 10].join(", ")
            );
        }
        let e = parse(&doc).unwrap_err();
        assert!(e.message.contains("alias bomb"), "{e:?}");
        assert_eq!(e.mark.line, 3, "stopped at c's first copy of b: {e:?}");
    }

    #[test]
    fn tags_are_refused_where_written() {
        let e = parse("é: x\nb: [1, !foo 2]\n").unwrap_err();
        assert_eq!(e.mark, Mark { line: 2, col: 8 });
        assert_eq!(e.width, 4);
        assert!(e.message.contains("`!foo`"), "{e:?}");
    }

    #[test]
    fn unknown_alias_is_named_at_the_alias() {
        let e = parse("a: 1\nb: *nope\n").unwrap_err();
        assert_eq!(e.mark, Mark { line: 2, col: 4 });
        assert!(e.message.contains("`*nope`"), "{e:?}");
    }

    #[test]
    fn aliases_expand() {
        let root = parse("x: &a [1, 2]\ny: *a\n").unwrap().unwrap();
        assert_eq!(root.get("y").unwrap().as_seq().unwrap().len(), 2);
    }
}
