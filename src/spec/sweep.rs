//! Validation of one spec file and expansion of its sweeps into instances.

use std::collections::BTreeMap;

use super::model::*;
use super::yaml::{self, Node, Value};
use super::SpecSource;
use crate::diagnostics::{did_you_mean, Diagnostic, Diagnostics, Mark};
use crate::escape::shown;
use crate::ops::{self, Field};

/// Instances one kernel entry may expand to; more is almost surely a mistake.
const MAX_INSTANCES_PER_KERNEL: usize = 4096;
/// Instances all spec files of one run may expand to together, counted before anything is
/// expanded, so that the time and memory of `check` follow this bound and not the product
/// of every sweep with every kernel entry.
pub const MAX_INSTANCES_PER_RUN: usize = 4096;
/// Diagnostics shown per file; past this the rest are counted. Every error copies its source
/// line, and a one-line file can hold tens of thousands of errors.
const MAX_DIAGNOSTICS_PER_FILE: usize = 100;
const DEFAULT_ARCHS: &[Arch] = &[Arch::Sm80, Arch::Sm90];

pub struct FileContext<'a> {
    src: &'a SpecSource,
    diags: Diagnostics,
    /// Errors found, shown or not.
    errors: usize,
    /// Where the first error past `MAX_DIAGNOSTICS_PER_FILE` was found.
    first_hidden: Option<Mark>,
}

/// One kernel entry, validated, with every value of every swept field: expanding it makes
/// `count` instances (fewer if some combinations are invalid).
pub struct KernelPlan<'n> {
    entry: &'n Node,
    fields: Fields<'n>,
    name: String,
    op: Op,
    /// The dtype's values, then those of each field of `SWEPT`, in that order.
    axes: Vec<Axis<'n>>,
    arch_nodes: Vec<(Arch, Option<&'n Node>)>,
    /// `tuning: candidates`: instances a tuning table must name for a pruned library to keep.
    tuning_candidate: bool,
    /// `tuning: table_only`: the same, and the bindings' fixed rules never pick them either.
    table_only: bool,
    pub count: usize,
}

/// The fields a kernel sweeps besides `dtype` (which comes first), in the order their
/// combinations are enumerated, the last varying fastest. This order is the order in which
/// instances are expanded and their problems reported: keep it when adding a field.
const SWEPT: &[Field] = &[
    Field::OutDtype,
    Field::Block,
    Field::Items,
    Field::Stages,
    Field::Variant,
    Field::Layout,
    Field::Affine,
    Field::Tf32,
    Field::Engine,
    Field::Tile,
    Field::Warp,
    Field::Epilogue,
    Field::HeadDim,
    Field::Causal,
    Field::TileQ,
    Field::TileKv,
    Field::RowsPerBlock,
    Field::Lean,
    Field::SplitK,
    Field::Multicast,
    Field::Pingpong,
];

/// The values of one swept field: `None` is the dtype. A field the kernel does not give has
/// one absent value (`Choice::value` `None`), so it multiplies nothing.
struct Axis<'n> {
    field: Option<Field>,
    choices: Vec<Choice<'n, Option<Val>>>,
}

/// A value of a swept field, of the kind `FileContext::field_values` parses for it.
#[derive(Clone, PartialEq)]
enum Val {
    DType(DType),
    Int(u32),
    Bool(bool),
    Variant(RowVariant),
    Layout(Layout),
    Engine(Engine),
    Tile([u32; 3]),
    Warp([u32; 2]),
    Chain(Vec<Epilogue>),
}

impl Val {
    /// Writes this value of `field` (`None`: the dtype) into an instance being built.
    fn set(&self, field: Option<Field>, inst: &mut Instance) {
        let p = &mut inst.params;
        match (field, self) {
            // The output dtype is the input's unless the kernel gives one.
            (None, Val::DType(d)) => (inst.dtype, inst.out_dtype) = (*d, *d),
            (Some(Field::OutDtype), Val::DType(d)) => inst.out_dtype = *d,
            (Some(Field::Block), Val::Int(v)) => p.block = Some(*v),
            (Some(Field::Items), Val::Int(v)) => p.items = Some(*v),
            (Some(Field::Stages), Val::Int(v)) => p.stages = Some(*v),
            (Some(Field::HeadDim), Val::Int(v)) => p.head_dim = Some(*v),
            (Some(Field::TileQ), Val::Int(v)) => p.tile_q = Some(*v),
            (Some(Field::TileKv), Val::Int(v)) => p.tile_kv = Some(*v),
            (Some(Field::RowsPerBlock), Val::Int(v)) => p.rows_per_block = Some(*v),
            (Some(Field::Lean), Val::Bool(v)) => p.lean = Some(*v),
            (Some(Field::SplitK), Val::Int(v)) => p.split_k = Some(*v),
            (Some(Field::Multicast), Val::Int(v)) => p.multicast = Some(*v),
            (Some(Field::Pingpong), Val::Bool(v)) => p.pingpong = Some(*v),
            (Some(Field::Affine), Val::Bool(v)) => p.affine = Some(*v),
            (Some(Field::Tf32), Val::Bool(v)) => p.tf32 = Some(*v),
            (Some(Field::Causal), Val::Bool(v)) => p.causal = Some(*v),
            (Some(Field::Variant), Val::Variant(v)) => p.variant = Some(*v),
            (Some(Field::Layout), Val::Layout(v)) => p.layout = Some(*v),
            (Some(Field::Engine), Val::Engine(v)) => p.engine = Some(*v),
            (Some(Field::Tile), Val::Tile(v)) => p.tile = Some(*v),
            (Some(Field::Warp), Val::Warp(v)) => p.warp = Some(*v),
            (Some(Field::Epilogue), Val::Chain(v)) => inst.epilogue = v.clone(),
            _ => debug_assert!(false, "value of the wrong kind for {field:?}"),
        }
    }
}

/// Every combination of one index per axis of these lengths, in the order nested loops over
/// the axes would give (the last varies fastest).
fn combinations(lens: &[usize]) -> impl Iterator<Item = Vec<usize>> + '_ {
    let total: usize = lens.iter().product();
    (0..total).map(move |mut k| {
        let mut at = vec![0; lens.len()];
        for (slot, &n) in at.iter_mut().zip(lens).rev() {
            *slot = k % n;
            k /= n;
        }
        at
    })
}
impl KernelPlan<'_> {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn mark(&self) -> Mark {
        self.entry.mark
    }
}

/// A value chosen for one field of one instance, with the node it came from.
#[derive(Clone)]
struct Choice<'n, T> {
    value: T,
    node: Option<&'n Node>,
}

/// The entry's fields after `defaults` are merged in: key → (key node, value node).
type Fields<'n> = BTreeMap<String, (&'n Node, &'n Node)>;

impl<'a> FileContext<'a> {
    pub fn new(src: &'a SpecSource) -> Self {
        FileContext {
            src,
            diags: Diagnostics::default(),
            errors: 0,
            first_hidden: None,
        }
    }

    pub fn error_at(&mut self, mark: Mark, width: usize, message: String) {
        self.errors += 1;
        if self.diags.len() >= MAX_DIAGNOSTICS_PER_FILE {
            self.first_hidden.get_or_insert(mark);
            return;
        }
        self.diags.push(
            Diagnostic::new(&self.src.path, mark, width, message).with_source(&self.src.text),
        );
    }

    /// Errors found so far, shown or not.
    pub fn errors(&self) -> usize {
        self.errors
    }

    /// The file's diagnostics, with a last one counting those not shown.
    pub fn finish(mut self) -> Diagnostics {
        if let Some(mark) = self.first_hidden {
            let hidden = self.errors - self.diags.len();
            self.diags.push(Diagnostic::new(
                &self.src.path,
                mark,
                1,
                format!(
                    "{hidden} more error{} in this file from here on, not shown \
                     (at most {MAX_DIAGNOSTICS_PER_FILE} are shown per file)",
                    if hidden == 1 { "" } else { "s" }
                ),
            ));
        }
        self.diags
    }

    fn error(&mut self, node: &Node, message: String) {
        self.error_at(node.mark, node.width, message);
    }

    /// Parses the file; `budget` is what is left of the run's YAML node budget.
    pub fn parse(&mut self, budget: &mut usize) -> Option<Node> {
        match yaml::parse_within(&self.src.text, budget) {
            Ok(Some(root)) => Some(root),
            Ok(None) => {
                let what = if self.src.text.trim().is_empty() {
                    "spec file is empty"
                } else {
                    "spec file holds only comments"
                };
                self.error_at(
                    Mark { line: 1, col: 1 },
                    1,
                    format!("{what}: expected a mapping with a `kernels` list"),
                );
                None
            }
            Err(e) => {
                self.error_at(e.mark, e.width, e.message);
                None
            }
        }
    }

    /// Validates the file's kernel entries without expanding their sweeps.
    pub fn plan<'n>(&mut self, root: &'n Node) -> Vec<KernelPlan<'n>> {
        let Some(top) = root.as_map() else {
            self.error(
                root,
                format!(
                    "expected a mapping with `defaults` and `kernels`, found {}",
                    root.kind()
                ),
            );
            return Vec::new();
        };
        let mut defaults: Option<&Node> = None;
        let mut kernels: Option<&Node> = None;
        for (k, v) in top {
            match k.as_str() {
                Some("defaults") => defaults = Some(v),
                Some("kernels") => kernels = Some(v),
                _ => {
                    let hint = did_you_mean(&scalar_text(k), &["defaults", "kernels"]);
                    self.error(
                        k,
                        format!(
                            "unknown top-level key `{}` (expected `defaults` or `kernels`){hint}",
                            scalar_text(k)
                        ),
                    )
                }
            }
        }
        let mut default_fields = Fields::new();
        if let Some(d) = defaults {
            match d.as_map() {
                Some(entries) => {
                    for (k, v) in entries {
                        if k.as_str() == Some("name") {
                            self.error(
                                k,
                                "`name` cannot be a default: each kernel names itself".into(),
                            );
                        } else if self.known_key(k) {
                            default_fields.insert(scalar_text(k), (k, v));
                        }
                    }
                }
                None if d.is_null() => {}
                None => self.error(
                    d,
                    format!("`defaults` must be a mapping, found {}", d.kind()),
                ),
            }
        }
        let Some(kernels) = kernels else {
            self.error_at(
                root.mark,
                1,
                "missing `kernels`: a spec file lists its kernels under `kernels:`".into(),
            );
            return Vec::new();
        };
        let Some(list) = kernels.as_seq() else {
            self.error(
                kernels,
                format!(
                    "`kernels` must be a list, found {}: start each kernel with `- name: ...`",
                    kernels.kind()
                ),
            );
            return Vec::new();
        };
        if list.is_empty() {
            self.error(
                kernels,
                "`kernels` is empty: list at least one kernel".into(),
            );
        }
        list.iter()
            .filter_map(|entry| self.plan_kernel(entry, &default_fields))
            .collect()
    }

    fn known_key(&mut self, k: &Node) -> bool {
        let mut all = vec!["name", "op", "dtype", "archs", "tuning"];
        all.extend(Field::ALL.iter().map(|f| f.key()));
        let Value::Scalar(key, _) = &k.value else {
            self.error(
                k,
                format!(
                    "a key must be a plain word such as `block`, found {}",
                    k.kind()
                ),
            );
            return false;
        };
        if all.contains(&key.as_str()) {
            return true;
        }
        let key = shown(key);
        let hint = if key == "<<" {
            " (YAML merge keys are not supported; shared fields go under `defaults`)".to_string()
        } else {
            did_you_mean(&key, &all)
        };
        self.error(
            k,
            format!(
                "unknown key `{key}` (expected one of: {}){hint}",
                all.join(", ")
            ),
        );
        false
    }

    fn plan_kernel<'n>(
        &mut self,
        entry: &'n Node,
        defaults: &Fields<'n>,
    ) -> Option<KernelPlan<'n>> {
        let Some(entries) = entry.as_map() else {
            self.error(
                entry,
                format!("a kernel must be a mapping, found {}", entry.kind()),
            );
            return None;
        };
        let mut fields = defaults.clone();
        for (k, v) in entries {
            if self.known_key(k) {
                fields.insert(scalar_text(k), (k, v));
            }
        }
        let errors_before = self.errors;

        // name
        let name = match fields.get("name") {
            Some((_, v)) => self.identifier(v),
            None => {
                self.error(
                    entry,
                    "kernel has no `name`: give it a plain identifier, e.g. `name: my_kernel`"
                        .into(),
                );
                None
            }
        };
        // op
        let op = match fields.get("op") {
            Some((_, v)) => self.keyword::<Op>(v, "op", Op::parse, Op::choices),
            None => {
                self.error(
                    entry,
                    format!("kernel has no `op` (expected one of: {})", Op::choices()),
                );
                None
            }
        };
        let op = op?;
        let info = ops::info(op);
        // fields the op does not take
        for (key, (k, _)) in &fields {
            if let Some(f) = Field::from_key(key) {
                if !info.fields.contains(&f) {
                    let takes: Vec<&str> = info.fields.iter().map(|f| f.key()).collect();
                    self.error(
                        k,
                        format!(
                            "`{key}` does not apply to op `{op}` (it takes: {})",
                            takes.join(", ")
                        ),
                    );
                }
            }
        }
        let dtypes = match fields.get("dtype") {
            Some((_, v)) => self.sweep(v, "dtype", |c, n| {
                c.keyword(n, "dtype", DType::parse, DType::choices)
            }),
            None => {
                self.error(
                    entry,
                    format!(
                        "kernel has no `dtype` (expected one of: {}, or a list of them)",
                        DType::choices()
                    ),
                );
                Vec::new()
            }
        };
        for d in &dtypes {
            if !info.dtypes.contains(&d.value) {
                let node = d.node.unwrap_or(entry);
                let ok: Vec<&str> = info.dtypes.iter().map(|d| d.as_str()).collect();
                self.error(
                    node,
                    format!(
                        "op `{op}` does not support dtype `{}` (it supports: {})",
                        d.value,
                        ok.join(", ")
                    ),
                );
            }
        }
        let arch_nodes: Vec<(Arch, Option<&Node>)> = match fields.get("archs") {
            Some((_, v)) => self
                .archs(v)
                .into_iter()
                .map(|(a, n)| (a, Some(n)))
                .collect(),
            None => DEFAULT_ARCHS.iter().map(|&a| (a, None)).collect(),
        };
        let (tuning_candidate, table_only) = match fields.get("tuning") {
            None => (false, false),
            Some((_, v)) => match &v.value {
                Value::Scalar(s, _) if s == "candidates" => (true, false),
                Value::Scalar(s, _) if s == "table_only" && op == Op::Gemm => (false, true),
                Value::Scalar(s, _) if s == "table_only" => {
                    self.error(
                        v,
                        "`tuning: table_only` is for GEMM kernels, whose fixed rules can leave \
                         instances to the tuning table; use `candidates`"
                            .into(),
                    );
                    (false, false)
                }
                _ => {
                    self.error(
                        v,
                        "`tuning` takes `candidates` (the kernel's instances are measured by \
                         `tilegen tune` and kept by `generate --prune-by-tuning` only where a \
                         tuning table names them) or `table_only` (GEMM: the same, and the \
                         fixed dispatch rules never pick them, only a tuning table does)"
                            .into(),
                    );
                    (false, false)
                }
            },
        };
        // A field the op does not take was reported above; it is not parsed as well.
        let get = |key: &str| {
            let applies = Field::from_key(key).is_none_or(|f| info.fields.contains(&f));
            fields.get(key).filter(|_| applies).map(|(_, v)| *v)
        };
        let mut axes = vec![Axis {
            field: None,
            choices: dtypes
                .into_iter()
                .map(|c| Choice {
                    value: Some(Val::DType(c.value)),
                    node: c.node,
                })
                .collect(),
        }];
        for &field in SWEPT {
            let choices = self.field_values(field, get(field.key()), op, info.epilogues);
            axes.push(Axis {
                field: Some(field),
                choices,
            });
        }

        if self.errors > errors_before {
            return None;
        }
        let name = name?;

        let counts: Vec<usize> = axes.iter().map(|a| a.choices.len()).collect();
        let total = counts.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n));
        if total.is_none_or(|t| t > MAX_INSTANCES_PER_KERNEL) {
            let swept: Vec<String> = counts
                .iter()
                .filter(|&&n| n > 1)
                .map(|n| n.to_string())
                .collect();
            let total = total.map_or_else(|| "too many".to_string(), |t| t.to_string());
            self.error(
                entry,
                format!(
                    "kernel `{name}` sweeps to {} = {total} instances, over the limit of {MAX_INSTANCES_PER_KERNEL}; \
                     split it into several kernels",
                    swept.join(" x ")
                ),
            );
            return None;
        }
        Some(KernelPlan {
            entry,
            fields,
            name,
            op,
            axes,
            arch_nodes,
            tuning_candidate,
            table_only,
            count: total.unwrap_or(usize::MAX),
        })
    }

    /// Expands a kernel's sweeps into instances, each with the position of its name; every
    /// combination the op rejects is reported instead.
    pub fn expand(&mut self, plan: &KernelPlan<'_>) -> Vec<(Instance, Mark)> {
        let KernelPlan {
            entry,
            ref fields,
            ref name,
            op,
            ref axes,
            ref arch_nodes,
            tuning_candidate,
            table_only,
            count: _,
        } = *plan;
        let info = ops::info(op);
        let get = |key: &str| {
            let applies = Field::from_key(key).is_none_or(|f| info.fields.contains(&f));
            fields.get(key).filter(|_| applies).map(|(_, v)| *v)
        };
        let archs: Vec<Arch> = arch_nodes.iter().map(|(a, _)| *a).collect();
        let name_node = get("name").unwrap_or(entry);
        let origin = Origin {
            file: self.src.rel.clone(),
            line: entry.mark.line,
        };
        let lens: Vec<usize> = axes.iter().map(|a| a.choices.len()).collect();
        let mut out = Vec::new();
        let mut reported = std::collections::BTreeSet::new();
        // Bounded by the plan's check of `count`.
        for at in combinations(&lens) {
            let picked: Vec<&Choice<'_, Option<Val>>> =
                axes.iter().zip(&at).map(|(a, &i)| &a.choices[i]).collect();
            // The node that gave this combination's value of a field (`None`: the dtype).
            let node_from = |f: Option<Field>| {
                axes.iter()
                    .zip(&picked)
                    .find(|(a, _)| a.field == f)
                    .and_then(|(_, c)| c.node)
            };
            // Every plan's first axis is the dtype, which sets both dtypes.
            let mut inst = Instance {
                kernel: KernelConfig {
                    name: String::new(),
                    op,
                    dtype: DType::F32,
                    out_dtype: DType::F32,
                    params: Params::default(),
                    epilogue: Vec::new(),
                },
                archs: archs.clone(),
                origin: origin.clone(),
                tuning_candidate,
                table_only,
            };
            for (axis, choice) in axes.iter().zip(&picked) {
                if let Some(v) = &choice.value {
                    v.set(axis.field, &mut inst);
                }
            }
            ops::apply_defaults(op, &mut inst.params);
            inst.name = instance_name(name, &inst);
            let mut bad = false;
            for (field, msg) in ops::check(&inst) {
                bad = true;
                let n = node_from(Some(field)).or(get(field.key())).unwrap_or(entry);
                if reported.insert((n.mark, msg.clone())) {
                    self.error(n, format!("{}: {msg}", inst.name));
                }
            }
            for (arch, msg) in ops::arch_problems(&inst) {
                bad = true;
                // A dtype the arch lacks points at the dtype; anything else the op needs
                // from newer hardware, at the arch.
                let lacks = |d: DType| msg.starts_with(&format!("{d} needs sm_"));
                let n = if lacks(inst.dtype) {
                    node_from(None)
                } else if lacks(inst.out_dtype) {
                    node_from(Some(Field::OutDtype))
                        .or(get("out_dtype"))
                        .or(node_from(None))
                } else {
                    arch_nodes
                        .iter()
                        .find(|(a, _)| *a == arch)
                        .and_then(|(_, n)| *n)
                }
                .unwrap_or(entry);
                if reported.insert((n.mark, msg.clone())) {
                    self.error(n, format!("{}: {msg}", inst.name));
                }
            }
            if !bad {
                // Stored as written without its defaults: an explicit default changes nothing.
                inst.params = ops::canonical(&inst);
                out.push((inst, name_node.mark));
            }
        }
        out
    }

    /// The values a kernel gives one swept field, parsed as that field's kind; one absent
    /// value when the kernel gives none.
    fn field_values<'n>(
        &mut self,
        field: Field,
        n: Option<&'n Node>,
        op: Op,
        epilogues: &[Epilogue],
    ) -> Vec<Choice<'n, Option<Val>>> {
        let key = field.key();
        match field {
            Field::OutDtype => self.optional_sweep(n, key, |c, n| {
                c.keyword(n, key, DType::parse, DType::choices)
                    .map(Val::DType)
            }),
            Field::Block
            | Field::Items
            | Field::Stages
            | Field::HeadDim
            | Field::TileQ
            | Field::TileKv
            | Field::RowsPerBlock
            | Field::SplitK
            | Field::Multicast => {
                self.optional_sweep(n, key, |c, n| c.integer(n, key).map(Val::Int))
            }
            Field::Affine | Field::Tf32 | Field::Causal | Field::Lean | Field::Pingpong => {
                self.optional_sweep(n, key, |c, n| c.boolean(n, key).map(Val::Bool))
            }
            Field::Variant => self.optional_sweep(n, key, |c, n| {
                c.keyword(n, key, RowVariant::parse, RowVariant::choices)
                    .map(Val::Variant)
            }),
            Field::Layout => self.optional_sweep(n, key, |c, n| {
                c.keyword(n, key, Layout::parse, Layout::choices)
                    .map(Val::Layout)
            }),
            Field::Engine => self.optional_sweep(n, key, |c, n| {
                c.keyword(n, key, Engine::parse, Engine::choices)
                    .map(Val::Engine)
            }),
            Field::Tile => self.optional_sweep_of_lists(n, key, |c, n| {
                c.int_array::<3>(n, key, "[m, n, k]").map(Val::Tile)
            }),
            Field::Warp => self.optional_sweep_of_lists(n, key, |c, n| {
                c.int_array::<2>(n, key, "[m, n]").map(Val::Warp)
            }),
            Field::Epilogue => match n {
                Some(n) => self
                    .epilogues(n, op, epilogues)
                    .into_iter()
                    .map(|c| Choice {
                        value: Some(Val::Chain(c.value)),
                        node: c.node,
                    })
                    .collect(),
                None => vec![Choice {
                    value: None,
                    node: None,
                }],
            },
        }
    }

    // ---- field parsers: each reports its own errors and returns None on failure ----

    fn identifier(&mut self, n: &Node) -> Option<String> {
        let Value::Scalar(s, _) = &n.value else {
            self.error(
                n,
                format!("`name` must be a plain identifier, found {}", n.kind()),
            );
            return None;
        };
        if s.is_empty() {
            self.error(
                n,
                "`name` is empty: expected a plain identifier such as `my_kernel`".into(),
            );
            return None;
        }
        // Names become C symbols, Rust identifiers and file names: anything beyond this
        // alphabet could inject code or paths. The same rule checks names from bundles.
        let problem = crate::escape::name_problem(s, crate::escape::SPEC_NAME);
        if let Some(problem) = problem {
            self.error(
                n,
                format!(
                    "name `{}` is not a plain identifier ({problem}): use lowercase letters, digits and single underscores, starting with a letter, at most {} characters",
                    shown(s),
                    crate::escape::SPEC_NAME.max_len
                ),
            );
            return None;
        }
        Some(s.clone())
    }

    fn keyword<T>(
        &mut self,
        n: &Node,
        what: &str,
        parse: fn(&str) -> Option<T>,
        choices: fn() -> String,
    ) -> Option<T> {
        match &n.value {
            Value::Scalar(s, _) => match parse(s) {
                Some(v) => Some(v),
                None => {
                    self.error(
                        n,
                        format!(
                            "unknown {what} `{}` (expected one of: {})",
                            shown(s),
                            choices()
                        ),
                    );
                    None
                }
            },
            _ => {
                self.error(
                    n,
                    format!("`{what}` must be one of {}, found {}", choices(), n.kind()),
                );
                None
            }
        }
    }

    fn integer(&mut self, n: &Node, what: &str) -> Option<u32> {
        let Value::Scalar(s, quoted) = &n.value else {
            self.error(
                n,
                format!("`{what}` must be a whole number, found {}", n.kind()),
            );
            return None;
        };
        if *quoted {
            self.error(n, format!("`{what}` must be a whole number, found the quoted text \"{}\" (remove the quotes)", shown(s)));
            return None;
        }
        if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) {
            self.error(
                n,
                format!("`{what}` must be a whole number, found `{}`", shown(s)),
            );
            return None;
        }
        if s.len() > 1 && s.starts_with('0') {
            // YAML 1.1 reads `0256` as octal and YAML 1.2 as decimal: refuse to guess.
            self.error(
                n,
                format!("`{what}` must be written without leading zeros, found `{s}`"),
            );
            return None;
        }
        let ceiling = integer_ceiling(what);
        match s.parse::<u32>() {
            Ok(v) if v <= ceiling => Some(v),
            _ => {
                self.error(
                    n,
                    format!("`{what}` value {s} is out of range (at most {ceiling})"),
                );
                None
            }
        }
    }

    fn boolean(&mut self, n: &Node, what: &str) -> Option<bool> {
        match n.as_str() {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => {
                let found = match &n.value {
                    Value::Scalar(s, true) => format!("the quoted text \"{}\"", shown(s)),
                    Value::Scalar(s, false) => format!("`{}`", shown(s)),
                    _ => n.kind().to_string(),
                };
                self.error(n, format!("`{what}` must be true or false, found {found}"));
                None
            }
        }
    }

    fn int_array<const N: usize>(&mut self, n: &Node, what: &str, shape: &str) -> Option<[u32; N]> {
        let items = n.as_seq().filter(|s| s.len() == N);
        let Some(items) = items else {
            self.error(
                n,
                format!("`{what}` must be a list of {N} whole numbers {shape}"),
            );
            return None;
        };
        let mut out = [0u32; N];
        for (slot, item) in out.iter_mut().zip(items) {
            *slot = self.integer(item, what)?;
        }
        Some(out)
    }

    /// The target archs, each with the node that names it, sorted and without repeats.
    fn archs<'n>(&mut self, n: &'n Node) -> Vec<(Arch, &'n Node)> {
        let nodes: Vec<&Node> = match &n.value {
            Value::Seq(items) => items.iter().collect(),
            _ => vec![n],
        };
        if nodes.is_empty() {
            self.error(n, "`archs` is empty: name at least one target".into());
        }
        let mut archs: Vec<(Arch, &Node)> = nodes
            .into_iter()
            .filter_map(|a| {
                self.keyword(a, "arch", Arch::parse, Arch::choices)
                    .map(|v| (v, a))
            })
            .collect();
        archs.sort_by_key(|(a, _)| *a);
        archs.dedup_by_key(|(a, _)| *a);
        archs
    }

    fn epilogues<'n>(
        &mut self,
        n: &'n Node,
        op: Op,
        allowed: &[Epilogue],
    ) -> Vec<Choice<'n, Vec<Epilogue>>> {
        // A list of lists sweeps; a flat list (or one name) is a single chain.
        let chains: Vec<&Node> = match &n.value {
            Value::Seq(items) if items.iter().any(|i| i.as_seq().is_some()) => {
                items.iter().collect()
            }
            _ => vec![n],
        };
        let mut out = Vec::new();
        for chain in chains {
            let steps: Vec<&Node> = match &chain.value {
                Value::Seq(items) => items.iter().collect(),
                Value::Null => Vec::new(),
                _ => vec![chain],
            };
            let mut parsed = Vec::new();
            for s in steps {
                if let Some(e) = self.keyword(s, "epilogue", Epilogue::parse, Epilogue::choices) {
                    if !allowed.contains(&e) {
                        let ok: Vec<&str> = allowed.iter().map(|e| e.as_str()).collect();
                        let ok = if ok.is_empty() {
                            "none".to_string()
                        } else {
                            ok.join(", ")
                        };
                        self.error(
                            s,
                            format!(
                                "op `{op}` does not support epilogue `{e}` (it supports: {ok})"
                            ),
                        );
                    } else if parsed.contains(&e) {
                        self.error(s, format!("epilogue `{e}` appears twice in one chain"));
                    } else {
                        parsed.push(e);
                    }
                }
            }
            out.push(Choice {
                value: parsed,
                node: Some(chain),
            });
        }
        self.no_repeats("epilogue", &out);
        out
    }

    /// Reports a value given twice in one sweep: both would make the same instance.
    fn no_repeats<T: PartialEq>(&mut self, what: &str, choices: &[Choice<'_, T>]) {
        for (i, c) in choices.iter().enumerate() {
            if let Some(first) = choices[..i].iter().find(|f| f.value == c.value) {
                if let (Some(node), Some(first)) = (c.node, first.node) {
                    self.error(
                        node,
                        format!(
                            "this `{what}` value repeats the one at {}:{}; each value in a sweep makes one instance",
                            first.mark.line, first.mark.col
                        ),
                    );
                }
            }
        }
    }

    fn sweep<'n, T: PartialEq>(
        &mut self,
        n: &'n Node,
        what: &str,
        mut one: impl FnMut(&mut Self, &'n Node) -> Option<T>,
    ) -> Vec<Choice<'n, T>> {
        let nodes: Vec<&Node> = match &n.value {
            Value::Seq(items) => items.iter().collect(),
            _ => vec![n],
        };
        if nodes.is_empty() {
            self.error(
                n,
                "empty list: a swept field needs at least one value".into(),
            );
        }
        let choices: Vec<Choice<T>> = nodes
            .into_iter()
            .filter_map(|node| {
                one(self, node).map(|value| Choice {
                    value,
                    node: Some(node),
                })
            })
            .collect();
        self.no_repeats(what, &choices);
        choices
    }

    fn optional_sweep<'n, T: PartialEq>(
        &mut self,
        n: Option<&'n Node>,
        what: &str,
        one: impl FnMut(&mut Self, &'n Node) -> Option<T>,
    ) -> Vec<Choice<'n, Option<T>>> {
        match n {
            None => vec![Choice {
                value: None,
                node: None,
            }],
            Some(n) => self
                .sweep(n, what, one)
                .into_iter()
                .map(|c| Choice {
                    value: Some(c.value),
                    node: c.node,
                })
                .collect(),
        }
    }

    /// Like `optional_sweep` for fields whose single value is itself a list (`tile: [m, n, k]`):
    /// a list of lists sweeps.
    fn optional_sweep_of_lists<'n, T: PartialEq>(
        &mut self,
        n: Option<&'n Node>,
        what: &str,
        mut one: impl FnMut(&mut Self, &'n Node) -> Option<T>,
    ) -> Vec<Choice<'n, Option<T>>> {
        let Some(n) = n else {
            return vec![Choice {
                value: None,
                node: None,
            }];
        };
        let nodes: Vec<&Node> = match &n.value {
            Value::Seq(items) if items.iter().any(|i| i.as_seq().is_some()) => {
                items.iter().collect()
            }
            _ => vec![n],
        };
        let choices: Vec<Choice<Option<T>>> = nodes
            .into_iter()
            .filter_map(|node| {
                one(self, node).map(|v| Choice {
                    value: Some(v),
                    node: Some(node),
                })
            })
            .collect();
        self.no_repeats(what, &choices);
        choices
    }
}

/// Ceiling on an integer field, checked before any op sees the value (in a spec's YAML, and in
/// a manifest that did not come from this process). It lies far above every op's own range
/// (the ops report those, with better messages) and keeps what the ops derive while checking
/// (defaults, names) within 32 bits: a spec like `tile: [4000000000, ...]` must be an error,
/// not a panic. Sizes such as shared memory are computed only once the op has accepted the
/// values (`ops::check`), since some products of values under the ceilings still overflow.
pub(crate) fn integer_ceiling(what: &str) -> u32 {
    match what {
        // Shared memory grows with stages times the tile area.
        "stages" => 64,
        "tile" | "warp" => 1024,
        _ => 4096,
    }
}

fn scalar_text(n: &Node) -> String {
    match &n.value {
        Value::Scalar(s, _) => shown(s).into_owned(),
        Value::Null => "null".into(),
        _ => n.kind().to_string(),
    }
}

/// `{name}_{dtype}[_to_{out}]{params}[_{epilogue}]`: readable, unique within a sweep, and a
/// function of the instance's own resolved values only (`ops::name_suffix`), never of what
/// else its kernel sweeps or of which defaults the spec wrote out.
fn instance_name(name: &str, inst: &Instance) -> String {
    let mut s = format!("{name}_{}", inst.dtype);
    if inst.out_dtype != inst.dtype {
        s += &format!("_to_{}", inst.out_dtype);
    }
    s + &ops::name_suffix(inst)
}

#[cfg(test)]
mod tests {
    use super::{combinations, Field, SWEPT};

    #[test]
    fn every_field_is_swept() {
        for f in Field::ALL {
            assert!(SWEPT.contains(f), "{f:?} is missing from SWEPT");
        }
        assert_eq!(SWEPT.len(), Field::ALL.len());
    }

    #[test]
    fn combinations_follow_nested_loops() {
        let mut nested = Vec::new();
        for a in 0..2 {
            for b in 0..1 {
                for c in 0..3 {
                    nested.push(vec![a, b, c]);
                }
            }
        }
        assert_eq!(combinations(&[2, 1, 3]).collect::<Vec<_>>(), nested);
        assert_eq!(combinations(&[2, 0, 3]).count(), 0);
    }
}
