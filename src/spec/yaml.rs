//! YAML with positions. serde_yaml is the gate for syntax (its messages and its limits on
//! recursion and alias expansion are good), but its values carry no positions; this module
//! rebuilds the document as a tree of nodes that remember where they came from, so every
//! validation error can name file:line:col.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::diagnostics::Mark;

/// Upper bound on nodes produced while expanding aliases: a defence against alias bombs
/// that is independent of serde_yaml's own.
const MAX_NODES: usize = 100_000;
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
    /// Characters of source this node's text spans (for underlines); 1 for collections.
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
            Value::Null => "nothing",
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
    pub message: String,
}

/// Parses one YAML document. An empty document yields `Ok(None)`.
pub fn parse(source: &str) -> Result<Option<Node>, ParseError> {
    // serde_yaml first: it rejects malformed YAML, duplicate keys and alias bombs with
    // precise messages before we build anything.
    if let Err(e) = serde_yaml::from_str::<serde_yaml::Value>(source) {
        let mark = e
            .location()
            .map(|l| Mark {
                line: l.line(),
                col: l.column(),
            })
            .unwrap_or(Mark { line: 1, col: 1 });
        let message = strip_location_suffix(&e.to_string());
        return Err(ParseError { mark, message });
    }
    let mut builder = TreeBuilder::default();
    let mut parser = Parser::new_from_str(source);
    if let Err(e) = parser.load(&mut builder, false) {
        return Err(ParseError {
            mark: to_mark(e.marker()),
            message: e.info().to_string(),
        });
    }
    if let Some(err) = builder.error {
        return Err(err);
    }
    Ok(builder.root)
}

/// serde_yaml appends " at line L column C" to its messages; we print the position ourselves.
fn strip_location_suffix(msg: &str) -> String {
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
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
struct TreeBuilder {
    stack: Vec<Open>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    nodes: usize,
    error: Option<ParseError>,
}

impl TreeBuilder {
    fn fail(&mut self, mark: Mark, message: &str) {
        if self.error.is_none() {
            self.error = Some(ParseError {
                mark,
                message: message.to_string(),
            });
        }
    }

    fn count(&mut self, n: usize, mark: Mark) -> bool {
        self.nodes += n;
        if self.nodes > MAX_NODES {
            self.fail(
                mark,
                "document expands to too many nodes (alias bomb?); specs are limited to 100000",
            );
            return false;
        }
        true
    }

    fn finish(&mut self, node: Node, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open::Seq(seq, _)) => {
                if let Value::Seq(items) = &mut seq.value {
                    items.push(node);
                }
            }
            Some(Open::Map(_, entries, pending, _)) => match pending.take() {
                None => *pending = Some(node),
                Some(key) => entries.push((key, node)),
            },
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

impl MarkedEventReceiver for TreeBuilder {
    fn on_event(&mut self, ev: Event, marker: Marker) {
        if self.error.is_some() {
            return;
        }
        let mark = to_mark(&marker);
        match ev {
            Event::Scalar(text, style, anchor, _tag) => {
                if !self.count(1, mark) {
                    return;
                }
                let quoted = !matches!(style, TScalarStyle::Plain);
                let width = text.chars().count() + if quoted { 2 } else { 0 };
                let value = if !quoted && matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL")
                {
                    Value::Null
                } else {
                    Value::Scalar(text, quoted)
                };
                self.finish(Node { value, mark, width }, anchor);
            }
            Event::SequenceStart(anchor, _) => {
                if self.stack.len() >= MAX_DEPTH {
                    return self.fail(mark, "document nests too deeply");
                }
                let node = Node {
                    value: Value::Seq(Vec::new()),
                    mark,
                    width: 1,
                };
                self.stack.push(Open::Seq(node, anchor));
            }
            Event::MappingStart(anchor, _) => {
                if self.stack.len() >= MAX_DEPTH {
                    return self.fail(mark, "document nests too deeply");
                }
                let node = Node {
                    value: Value::Null,
                    mark,
                    width: 1,
                };
                self.stack.push(Open::Map(node, Vec::new(), None, anchor));
            }
            Event::SequenceEnd => {
                if let Some(Open::Seq(node, anchor)) = self.stack.pop() {
                    self.finish(node, anchor);
                }
            }
            Event::MappingEnd => {
                if let Some(Open::Map(mut node, entries, _, anchor)) = self.stack.pop() {
                    node.value = Value::Map(entries);
                    self.finish(node, anchor);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(mut node) => {
                    if !self.count(node_count(&node), mark) {
                        return;
                    }
                    node.mark = mark;
                    self.finish(node, 0);
                }
                None => self.fail(mark, "alias to an unknown anchor"),
            },
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
    fn aliases_expand() {
        let root = parse("x: &a [1, 2]\ny: *a\n").unwrap().unwrap();
        assert_eq!(root.get("y").unwrap().as_seq().unwrap().len(), 2);
    }
}
