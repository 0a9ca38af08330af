//! The line table of a parsed document: every node's position, recorded in parse order against its
//! parent's index (one flat table and one string of all mapping keys per document), instead of a map
//! keyed by each node's whole path (a path and its key strings copied per node).
//!
//! A lookup answers what a map `path -> position` filled in parse order would (the last node met at that
//! path wins, nodes of a mapping value that a repeated key replaced included), falling back to the nearest
//! ancestor that has a position.

use std::sync::Arc;

use super::{FieldPath, PathSeg, Position};

/// No node (no parent, no sibling, no child yet).
const NONE: usize = usize::MAX;

/// One node of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    parent: usize,
    next_sibling: usize,
    last_child: usize,
    /// A mapping key (`keys[start..end]`) or a sequence index (`Index(i)`); the root has `Root`.
    seg: Seg,
    /// Line 0: the parser gave no position for this node.
    line: u64,
    column: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seg {
    Root,
    Key { start: usize, end: usize },
    Index(usize),
}

/// What a node is to its parent, when it is recorded.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step<'k> {
    /// The document root.
    Root,
    /// The value of mapping key `k`.
    Key(&'k str),
    /// Item `i` of a sequence.
    Index(usize),
}

/// The positions of one parsed text's nodes (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Table {
    entries: Vec<Entry>,
    keys: String,
}

impl Table {
    /// Records a node under `parent` (`None` for the root) and returns its index. `line` 0 means no
    /// position (lookups pass over it to an ancestor).
    pub(super) fn push(
        &mut self,
        parent: Option<usize>,
        step: Step<'_>,
        line: u64,
        column: u64,
    ) -> usize {
        let seg = match step {
            Step::Root => Seg::Root,
            Step::Key(k) => {
                let start = self.keys.len();
                self.keys.push_str(k);
                Seg::Key {
                    start,
                    end: self.keys.len(),
                }
            }
            Step::Index(i) => Seg::Index(i),
        };
        let index = self.entries.len();
        let parent = parent.unwrap_or(NONE);
        if let Some(p) = self.entries.get_mut(parent) {
            let previous = std::mem::replace(&mut p.last_child, index);
            if let Some(prev) = self.entries.get_mut(previous) {
                prev.next_sibling = index;
            }
        }
        self.entries.push(Entry {
            parent,
            next_sibling: NONE,
            last_child: NONE,
            seg,
            line,
            column,
        });
        index
    }

    fn first_child(&self, node: usize) -> Option<usize> {
        // Parse order puts a node's first child right after it.
        let next = node.checked_add(1)?;
        self.entries
            .get(next)
            .filter(|e| e.parent == node)
            .map(|_| next)
    }

    fn matches(&self, node: usize, seg: &PathSeg) -> bool {
        let Some(e) = self.entries.get(node) else {
            return false;
        };
        match (e.seg, seg) {
            (Seg::Key { start, end }, PathSeg::Key(k)) => {
                self.keys.get(start..end) == Some(k.as_str())
            }
            (Seg::Index(i), PathSeg::Index(j)) => i == *j,
            _ => false,
        }
    }

    fn position_of(&self, node: usize) -> Option<Position> {
        self.entries
            .get(node)
            .filter(|e| e.line > 0)
            .map(|e| Position {
                line: e.line,
                column: e.column,
            })
    }

    /// For `segs` (a path from the root), the position of the last node met at each depth
    /// `0..=segs.len()` along it, deepest first: `found(depth, position)` is called for the depths that
    /// have one, from the deepest up, until it returns true.
    fn walk(&self, segs: &[PathSeg], mut found: impl FnMut(usize, Position) -> bool) {
        if self.entries.is_empty() {
            return;
        }
        // The nodes at each depth whose path equals `segs[..depth]`, in parse order.
        let mut hits: Vec<Option<Position>> = Vec::with_capacity(segs.len() + 1);
        hits.push(self.position_of(0));
        let mut frontier = vec![0usize];
        for seg in segs {
            let mut next = Vec::new();
            for &f in &frontier {
                let mut child = self.first_child(f);
                while let Some(c) = child {
                    if self.matches(c, seg) {
                        next.push(c);
                    }
                    child = self
                        .entries
                        .get(c)
                        .map(|e| e.next_sibling)
                        .filter(|&s| s != NONE);
                }
            }
            if next.is_empty() {
                break;
            }
            hits.push(next.iter().rev().find_map(|&n| self.position_of(n)));
            frontier = next;
        }
        for (depth, hit) in hits.iter().enumerate().rev() {
            if let Some(p) = hit
                && found(depth, *p)
            {
                return;
            }
        }
    }

    /// The path of node `node` (root first).
    pub(super) fn path_of(&self, node: usize) -> FieldPath {
        let mut segs = Vec::new();
        let mut cur = node;
        while let Some(e) = self.entries.get(cur) {
            match e.seg {
                Seg::Root => {}
                Seg::Key { start, end } => {
                    segs.push(PathSeg::Key(
                        self.keys.get(start..end).unwrap_or_default().to_owned(),
                    ));
                }
                Seg::Index(i) => segs.push(PathSeg::Index(i)),
            }
            cur = e.parent;
        }
        segs.reverse();
        FieldPath::from_segments(segs)
    }

    /// The position recorded last for exactly `path` (no ancestor fallback).
    pub(super) fn exact(&self, path: &FieldPath) -> Option<Position> {
        let want = path.segments().len();
        let mut out = None;
        self.walk(path.segments(), |depth, p| {
            if depth == want {
                out = Some(p);
            }
            true
        });
        out
    }
}

/// A document's view of a [`Table`]: the whole table, or the subtree at `root` (an item of a `List`,
/// which shares its list's table).
#[derive(Clone, Debug, Default)]
pub(super) struct Positions {
    table: Arc<Table>,
    root: Vec<PathSeg>,
}

impl Positions {
    /// The whole table.
    pub(super) fn new(table: Table) -> Self {
        Self {
            table: Arc::new(table),
            root: Vec::new(),
        }
    }

    /// The subtree at `root` of a shared table.
    pub(super) fn subtree(table: &Arc<Table>, root: Vec<PathSeg>) -> Self {
        Self {
            table: Arc::clone(table),
            root,
        }
    }

    /// The shared table (for [`Positions::subtree`]).
    pub(super) fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// The position of `path` (below this view's root), falling back to its nearest ancestor that has
    /// one, but not above this view's root.
    pub(super) fn get(&self, path: &FieldPath) -> Option<Position> {
        let mut out = None;
        let floor = self.root.len();
        let visit = |depth: usize, p: Position| {
            if depth >= floor {
                out = Some(p);
                true
            } else {
                false
            }
        };
        if self.root.is_empty() {
            self.table.walk(path.segments(), visit);
        } else {
            let mut full = self.root.clone();
            full.extend_from_slice(path.segments());
            self.table.walk(&full, visit);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(line: u64) -> Option<Position> {
        Some(Position { line, column: 1 })
    }

    #[test]
    fn last_write_wins_and_missing_fields_fall_back() {
        // a: {x: 1}   (line 1, x line 2)
        // a: {y: 2}   (line 3, y line 4)
        let mut t = Table::default();
        let root = t.push(None, Step::Root, 1, 1);
        let a1 = t.push(Some(root), Step::Key("a"), 1, 1);
        t.push(Some(a1), Step::Key("x"), 2, 1);
        let a2 = t.push(Some(root), Step::Key("a"), 3, 1);
        t.push(Some(a2), Step::Key("y"), 4, 1);
        let p = Positions::new(t);
        let a = FieldPath::root().key("a");
        assert_eq!(p.get(&a), pos(3));
        assert_eq!(p.get(&a.key("y")), pos(4));
        // Only the replaced value had `x`: the map kept its position.
        assert_eq!(p.get(&a.key("x")), pos(2));
        assert_eq!(p.get(&a.key("z")), pos(3));
        assert_eq!(p.get(&FieldPath::root().key("b")), pos(1));
        assert_eq!(p.table().path_of(4), a.key("y"));
    }

    #[test]
    fn subtree_view_stops_at_its_root() {
        let mut t = Table::default();
        let root = t.push(None, Step::Root, 1, 1);
        let items = t.push(Some(root), Step::Key("items"), 2, 1);
        let i0 = t.push(Some(items), Step::Index(0), 3, 3);
        t.push(Some(i0), Step::Key("kind"), 3, 5);
        let table = Arc::new(t);
        let sub = Positions::subtree(
            &table,
            vec![PathSeg::Key("items".into()), PathSeg::Index(0)],
        );
        assert_eq!(
            sub.get(&FieldPath::root().key("kind")).map(|p| p.column),
            Some(5)
        );
        assert_eq!(
            sub.get(&FieldPath::root().key("spec")).map(|p| p.line),
            Some(3)
        );
        let none = Positions::subtree(
            &table,
            vec![PathSeg::Key("items".into()), PathSeg::Index(1)],
        );
        assert_eq!(none.get(&FieldPath::root()), None);
    }
}
