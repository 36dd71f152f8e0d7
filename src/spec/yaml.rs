//! YAML with positions. serde_yaml is the gate for syntax (libyaml's messages name what it
//! expected and where the enclosing collection began), but its values carry no positions;
//! this module rebuilds the document as a tree of nodes that remember where they came from,
//! so every validation error can name file:line:col. The tree builder also enforces what a
//! spec needs beyond syntax, each at the offending text: one document per file, no duplicate
//! keys, no tags, bounded nesting and bounded alias expansion (alias bombs), per file and
//! across every file of a run.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::diagnostics::Mark;

/// Upper bound on nodes produced while expanding aliases: a defence against alias bombs.
const MAX_NODES: usize = 100_000;
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
    // The syntax gate. Deserializing into `IgnoredAny` checks the syntax without building
    // values, so numbers too large for any Rust integer reach validation (which says which
    // field is out of range) instead of failing here with serde's internal wording.
    let gate: Result<serde::de::IgnoredAny, _> =
        serde::Deserialize::deserialize(serde_yaml::Deserializer::from_str(source));
    let mut gate_error = None;
    if let Err(e) = gate {
        let message = libyaml_message(&e.to_string());
        match e.location() {
            // libyaml's reader (bad characters) gives a byte offset in its message, and a
            // location of 1:1 that means nothing.
            _ if byte_offset(&message).is_some() => return Err(reader_error(source, &message)),
            // A positioned error is a syntax error, best told in libyaml's words.
            Some(l) => {
                let mark = Mark {
                    line: l.line(),
                    col: l.column(),
                };
                let message = match alias_at(source, mark) {
                    Some(name) if message.starts_with("unknown anchor") => format!(
                        "alias `*{name}` refers to no anchor; define `&{name}` on a value before it"
                    ),
                    _ => message,
                };
                return Err(invalid(mark, message));
            }
            // An error without a position (a second document) is found again by the builder
            // below, which knows where it is; this is the fallback.
            None => gate_error = Some(invalid(Mark { line: 1, col: 1 }, message)),
        }
    }
    let mut builder = TreeBuilder {
        source,
        budget: *budget,
        ..TreeBuilder::default()
    };
    let mut parser = Parser::new_from_str(source);
    let parsed = parser.load(&mut builder, true);
    *budget = budget.saturating_sub(builder.nodes);
    // The builder stops at its first error; anything the parser said after that is a
    // consequence, so the builder's error wins.
    if let Some(err) = builder.error {
        return Err(err);
    }
    if let Err(e) = parsed {
        let mut message = e.info().to_string();
        if message.contains("recursion limit") {
            message += &format!("; a spec nests a handful of levels, at most {MAX_DEPTH}");
        }
        return Err(invalid(to_mark(e.marker()), message));
    }
    if let Some(e) = gate_error {
        return Err(e);
    }
    Ok(builder.root)
}

/// Rewrites a serde_yaml (libyaml) message for a diagnostic that already shows the
/// position: `did not find expected ',' or ']' at line 5 column 10, while parsing a flow
/// sequence at line 4 column 12` becomes `did not find expected ',' or ']' (while parsing a
/// flow sequence that starts at 4:12)`.
fn libyaml_message(msg: &str) -> String {
    let (problem, context) = match msg.split_once(", while ") {
        Some((p, c)) => (p, Some(c)),
        None => (msg, None),
    };
    let problem = match problem.find(" at line ") {
        Some(i) => &problem[..i],
        None => problem,
    };
    let mut out = problem.to_string();
    if let Some(context) = context {
        let context = match context.split_once(" at line ") {
            Some((what, pos)) => match pos.split_once(" column ") {
                Some((line, col)) => format!("{what} that starts at {line}:{col}"),
                None => what.to_string(),
            },
            None => context.to_string(),
        };
        out += &format!(" (while {context})");
    }
    if problem.contains("tab character") {
        out += "; YAML indents with spaces only";
    } else if context.is_some_and(|c| c.contains("block")) {
        out += "; check the indentation";
    }
    out
}

/// The byte offset in a libyaml reader message (`... at position 41`).
fn byte_offset(message: &str) -> Option<usize> {
    message.rsplit_once(" at position ")?.1.parse().ok()
}

/// A reader error (a character YAML does not allow) at its line and column, naming the
/// character, which may well be invisible.
fn reader_error(source: &str, message: &str) -> ParseError {
    let offset = byte_offset(message).unwrap_or(0).min(source.len());
    let problem = message
        .rsplit_once(" at position ")
        .map_or(message, |(p, _)| p);
    let mut offset_ok = offset;
    while !source.is_char_boundary(offset_ok) {
        offset_ok -= 1;
    }
    let before = &source[..offset_ok];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let found = source[offset_ok..]
        .chars()
        .next()
        .map_or(String::new(), |c| format!(" (found U+{:04X})", c as u32));
    invalid(Mark { line, col }, format!("{problem}{found}"))
}

/// The name of the alias (`*name`) that starts at `mark`, if one does.
fn alias_at(source: &str, mark: Mark) -> Option<String> {
    let line = source.lines().nth(mark.line.checked_sub(1)?)?;
    let rest: String = line.chars().skip(mark.col.checked_sub(1)?).collect();
    let name: String = rest
        .strip_prefix('*')?
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ',' | '[' | ']' | '{' | '}'))
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The tag (`!!str`, `!foo`) written just before the node at `mark`, with its position.
fn tag_before(source: &str, mark: Mark) -> Option<(Mark, String)> {
    // The node's byte offset.
    let mut offset = 0;
    for (i, line) in source.split_inclusive('\n').enumerate() {
        if i + 1 == mark.line {
            offset += line
                .char_indices()
                .nth(mark.col.checked_sub(1)?)
                .map_or(line.len(), |(b, _)| b);
            break;
        }
        offset += line.len();
    }
    let before = source.get(..offset)?.trim_end();
    let start = before
        .rfind(|c: char| c.is_whitespace() || matches!(c, '[' | '{' | ','))
        .map_or(0, |i| i + 1);
    let tag = &before[start..];
    if !tag.starts_with('!') {
        return None;
    }
    let line = before[..start].matches('\n').count() + 1;
    let col = before[..start]
        .rsplit('\n')
        .next()
        .map_or(0, |l| l.chars().count())
        + 1;
    Some((Mark { line, col }, tag.to_string()))
}

fn to_mark(m: &Marker) -> Mark {
    // yaml-rust2 lines are 1-based and columns 0-based.
    Mark {
        line: m.line(),
        col: m.col() + 1,
    }
}

enum Open {
    Seq(Node, usize),
    Map(Node, Vec<(Node, Node)>, Option<Node>, usize),
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

    fn count(&mut self, n: usize, mark: Mark) -> bool {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            self.fail(
                mark,
                format!(
                    "document expands to more than {MAX_NODES} nodes here (an alias bomb?); \
                     a spec has no use for that many"
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
    fn untagged(&mut self, tag: Option<&Tag>, mark: Mark) -> bool {
        let Some(tag) = tag else { return true };
        let resolved = match tag.handle.strip_prefix("tag:yaml.org,2002:") {
            Some("") => format!("!!{}", tag.suffix),
            _ => format!("{}{}", tag.handle, tag.suffix),
        };
        let (mark, width, written) = match tag_before(self.source, mark) {
            Some((m, text)) => (m, text.chars().count(), text),
            None => (mark, 1, resolved),
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
            Some(Open::Seq(seq, _)) => {
                if let Value::Seq(items) = &mut seq.value {
                    items.push(node);
                }
            }
            Some(Open::Map(_, entries, pending, _)) => match pending.take() {
                None => {
                    // A key. Two equal keys in one mapping are an error (YAML says so, and
                    // silently keeping either would hide a mistake).
                    if let Value::Scalar(text, _) = &node.value {
                        if let Some((first, _)) = entries
                            .iter()
                            .find(|(k, _)| k.as_str() == Some(text.as_str()))
                        {
                            duplicate = Some((node.mark, text.clone(), first.mark));
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
}

fn node_count(n: &Node) -> usize {
    match &n.value {
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

impl MarkedEventReceiver for TreeBuilder<'_> {
    fn on_event(&mut self, ev: Event, marker: Marker) {
        if self.error.is_some() {
            return;
        }
        let mark = to_mark(&marker);
        match ev {
            Event::DocumentStart => {
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
                if !self.untagged(tag.as_ref(), mark) || !self.count(1, mark) {
                    return;
                }
                let quoted = !matches!(style, TScalarStyle::Plain);
                let width = text.chars().count() + if quoted { 2 } else { 0 };
                let value =
                    if !quoted && matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL") {
                        Value::Null
                    } else {
                        Value::Scalar(text, quoted)
                    };
                self.finish(Node { value, mark, width }, anchor);
            }
            Event::SequenceStart(anchor, tag) => {
                if !self.untagged(tag.as_ref(), mark) {
                    return;
                }
                let node = Node {
                    value: Value::Seq(Vec::new()),
                    mark,
                    width: 1,
                };
                self.open(Open::Seq(node, anchor), mark);
            }
            Event::MappingStart(anchor, tag) => {
                if !self.untagged(tag.as_ref(), mark) {
                    return;
                }
                let node = Node {
                    value: Value::Null,
                    mark,
                    width: 1,
                };
                self.open(Open::Map(node, Vec::new(), None, anchor), mark);
            }
            Event::SequenceEnd => {
                if let Some(Open::Seq(node, anchor)) = self.stack.pop() {
                    self.finish(node, anchor);
                }
            }
            Event::MappingEnd => {
                if let Some(Open::Map(mut node, entries, _, anchor)) = self.stack.pop() {
                    // The parser marks a block mapping at its first `:`; the mapping starts at
                    // its first key (a flow mapping's `{` comes before its first key and stays).
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
            _ => {}
        }
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
    fn huge_numbers_pass_the_syntax_gate() {
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
    fn aliases_expand() {
        let root = parse("x: &a [1, 2]\ny: *a\n").unwrap().unwrap();
        assert_eq!(root.get("y").unwrap().as_seq().unwrap().len(), 2);
    }
}
