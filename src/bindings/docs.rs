//! Doc comments of the generated methods: what each op computes, what a call must pass, and
//! how a typed method picks among its instances.

use crate::manifest::InstanceEntry;
use crate::ops::calls::{self, Group};

/// What the instance computes, as one sentence.
pub fn what(inst: &InstanceEntry) -> String {
    (crate::ops::info(inst.op).what)(&inst.kernel)
}

/// What a call must pass, beyond the types.
pub fn requirements(inst: &InstanceEntry) -> String {
    (calls::of(inst).requirements)(inst)
}

/// One instance's niche, for dispatch lists.
pub fn niche(inst: &InstanceEntry) -> String {
    (calls::of(inst).niche)(inst)
}

/// How a group's method picks its instance.
pub fn dispatch(g: &Group, m: &crate::manifest::Manifest) -> Vec<String> {
    if g.members.len() == 1 {
        let inst = &m.instances[g.members[0]];
        return vec![format!("Runs [`Self::{}`] ({}).", inst.name, niche(inst))];
    }
    let rule = (calls::of(g.first(m)).dispatch_rule)(m, g);
    let mut lines = vec![rule.to_string()];
    for &i in &g.members {
        let inst = &m.instances[i];
        let table_only = if inst.table_only { "; table-only" } else { "" };
        lines.push(format!(
            "- [`Self::{}`]: {}{table_only}",
            inst.name,
            niche(inst)
        ));
    }
    if g.members.iter().any(|&i| m.instances[i].table_only) {
        lines.push(String::new());
        lines.push(
            "The rules pass over the table-only members: only a tuning table picks them.".into(),
        );
    }
    let members: Vec<&crate::manifest::InstanceEntry> =
        g.members.iter().map(|&i| &m.instances[i]).collect();
    let tuned = crate::tuning::dispatch_of(&m.tuning, &g.method, &members);
    if !tuned.is_empty() {
        let mut devices: Vec<&str> = tuned.iter().map(|d| d.device).collect();
        devices.dedup();
        let devices: Vec<String> = devices.into_iter().map(crate::escape::doc_text).collect();
        let how = match crate::tuning::tilings_of(&members) {
            Some(_) => format!(
                "the instance predicted fastest from its times at the nearby ones of {} measured shapes, scaled by rounds of output tiles",
                tuned.len()
            ),
            None => format!("the fastest instance at the nearest of {} measured shapes", tuned.len()),
        };
        lines.push(String::new());
        lines.push(format!(
            "Before these rules, a tuning table measured on {} picks {how} (by name, else by compute capability; see `tilegen_runtime::tuning`).",
            devices.join(", "),
        ));
    }
    lines
}
