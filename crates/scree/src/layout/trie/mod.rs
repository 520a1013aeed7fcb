//! The `trie` layout (LSM-trie, papers/lsm-trie.txt §2.3–2.4): a trie of *containers* with
//! fan-out 8, addressed by the placement hash of the key (3 bits per level); each container is
//! a *pile* of HTables (*sub-levels*, newest first). Flushes land in the root. An upper-level
//! container whose pile is full is compacted: its whole pile is merged and written as one new
//! sub-level in each of its eight children, so only the upper level's data is read and written
//! (linear growth within a level, exponential across levels). The last level (a fixed depth,
//! persisted) only grows linearly; each last-level container keeps a *BloomCluster* (one block
//! per bucket column holding every sub-level's filter) rebuilt as metadata when a sub-level is
//! added, and is garbage-collected (pile merged in place) when sampling estimates its garbage
//! above a threshold. Upper-level filters stay in memory under a budget. Scans are not
//! supported (keys are hash-ordered). Design notes: docs/architecture-trie.md.
//!
//! This file is the policy: which job is next (BloomCluster rebuilds, then the fullest upper
//! container, then garbage collection), reservations so that compactions of different
//! containers run in parallel, back-pressure, and full (manual) compaction.

pub mod handle;
pub mod jobs;
pub mod version;

use std::sync::Arc;

use crate::error::Result;
use crate::layout::reserve::{self, Claim, Reservations};
use crate::layout::{Job, JobCtx, Layout, LayoutVersion, ManualScope, ManualStep, Pressure};
use crate::manifest::edit::KsEdit;
use crate::memtable::Memtable;
use crate::options::{KeyspaceOptions, Layout as LayoutKind, TrieOptions};
use crate::table::{TableCtx, TableFile};

use handle::Shared;
use jobs::ChildInfo;
use version::{child_id, in_subtree, params_record, ClusterRef, Container, TrieVersion};

/// What a trie job holds: a container's pile it merges, or a last-level container's
/// BloomCluster it rebuilds (by container id).
#[derive(PartialEq, Eq)]
enum TrieClaim {
    Pile(u64),
    Cluster(u64),
}

impl Claim for TrieClaim {
    fn conflicts(&self, other: &Self) -> bool {
        self == other
    }
}

/// A trie job's claims: released when it fails, kept once it has produced its edit until a
/// version shows that edit ([`succeed`]).
type Reservation = reserve::Reservation<TrieClaim, TrieVersion>;

/// Marks `res`'s job successful: its claims stay until a version shows `edit` installed (its
/// first removed file gone, or its first new file present), so that no other job picks the
/// same inputs in between.
fn succeed(res: &mut Reservation, edit: &KsEdit) {
    let gone = edit.removed.first().copied();
    let new = edit
        .added
        .first()
        .map(|a| a.meta.file_no)
        .or_else(|| edit.records.iter().find_map(cluster_file_of));
    res.keep_until(move |v: &TrieVersion| {
        gone.is_some_and(|f| !v.has_file(f))
            || new.is_some_and(|f| v.has_file(f))
            || (gone.is_none() && new.is_none())
    });
}

fn cluster_file_of(r: &crate::manifest::edit::LayoutRecord) -> Option<u64> {
    if r.tag != version::TAG_CLUSTER {
        return None;
    }
    let mut rd = crate::coding::Reader::new(&r.data);
    rd.varint()?;
    rd.varint()
}

/// The `trie` policy.
pub struct Trie {
    shared: Arc<Shared>,
    busy: Reservations<TrieClaim, TrieVersion>,
}

impl Trie {
    /// A policy with no run-time state yet.
    pub fn new() -> Self {
        Trie {
            shared: Shared::new(TrieOptions::default().filter_memory_bytes),
            busy: Reservations::default(),
        }
    }

    fn v<'a>(&self, version: &'a Arc<dyn LayoutVersion>) -> Option<&'a TrieVersion> {
        version.as_any().downcast_ref::<TrieVersion>()
    }

    /// Reserves the piles and BloomClusters of the containers `piles` and `clusters`; `None`
    /// when one is held, or when `v` is older than a version already seen (a caller that read
    /// its version before an install, e.g. `Db::compact`, could take inputs a finished job
    /// already consumed).
    fn reserve(&self, v: &TrieVersion, piles: &[u64], clusters: &[u64]) -> Option<Reservation> {
        let claims = piles
            .iter()
            .map(|p| TrieClaim::Pile(*p))
            .chain(clusters.iter().map(|c| TrieClaim::Cluster(*c)))
            .collect();
        self.busy.reserve(v, v.gen, claims)
    }

    /// Last-level containers whose pile has tables the BloomCluster does not cover (and a
    /// rebuild was not already found impossible for this pile).
    fn needs_cluster(&self, v: &TrieVersion, c: &Container) -> bool {
        if c.depth != v.last_depth || c.pile.is_empty() || c.uncovered() == 0 {
            return false;
        }
        let newest = c.pile.iter().map(|t| t.meta.file_no).max().unwrap_or(0);
        self.shared.cluster_failed.lock().get(&c.id) != Some(&newest)
    }

    /// Last-level containers to merge in place: over the garbage threshold, or at the pile cap
    /// (`max_last_level_sublevels`, which applies even with garbage collection off).
    fn needs_gc(&self, v: &TrieVersion, c: &Container, o: &TrieOptions) -> bool {
        if c.depth != v.last_depth {
            return false;
        }
        let generations = c.generations();
        if generations < 2 {
            return false;
        }
        if generations >= o.max_last_level_sublevels {
            return true;
        }
        o.gc_garbage_ratio > 0.0
            && c.gc
                .is_some_and(|e| e.signature == c.newest() && e.ratio > o.gc_garbage_ratio)
    }

    fn compaction_job(&self, v: &TrieVersion, c: &Container) -> Option<Box<dyn Job>> {
        let children: Vec<u64> = (0..8u8).map(|i| child_id(c.id, i)).collect();
        let child_last = c.depth + 1 == v.last_depth;
        let res = self.reserve(v, &[c.id], &[])?;
        // Rebuild a last-level child's BloomCluster in this job when nobody else holds it. The
        // version is not stale (checked by `reserve` under the same lock).
        let rebuild: Vec<bool> = {
            let mut b = self.busy.lock();
            let stale = b.is_stale(v.gen);
            children
                .iter()
                .map(|id| child_last && !stale && b.take(res.job(), TrieClaim::Cluster(*id)))
                .collect()
        };
        let mut infos = Vec::with_capacity(8);
        for (id, rebuild) in children.into_iter().zip(rebuild) {
            let child = v.containers.get(&id);
            let subtree_empty = !v
                .containers
                .values()
                .any(|x| in_subtree(x.id, id) && !x.pile.is_empty());
            infos.push(ChildInfo {
                id,
                pile: child.map(|x| x.pile.clone()).unwrap_or_default(),
                cluster: child.and_then(|x| x.cluster.clone()),
                rebuild_cluster: rebuild,
                subtree_empty,
            });
        }
        Some(Box::new(CompactJob {
            cid: c.id,
            inputs: c.pile.clone(),
            children: infos,
            last_depth: v.last_depth,
            shared: self.shared.clone(),
            res,
        }))
    }

    fn gc_job(&self, v: &TrieVersion, c: &Container) -> Option<Box<dyn Job>> {
        let res = self.reserve(v, &[c.id], &[c.id])?;
        Some(Box::new(GcJob {
            cid: c.id,
            pile: c.pile.clone(),
            cluster: c.cluster.clone(),
            shared: self.shared.clone(),
            res,
        }))
    }

    fn cluster_job(&self, v: &TrieVersion, c: &Container) -> Option<Box<dyn Job>> {
        let res = self.reserve(v, &[], &[c.id])?;
        Some(Box::new(ClusterJob {
            cid: c.id,
            pile: c.pile.clone(),
            cluster: c.cluster.clone(),
            shared: self.shared.clone(),
            res,
        }))
    }

    /// Containers sorted by id (deterministic choices).
    fn sorted(v: &TrieVersion) -> Vec<&Arc<Container>> {
        let mut cs: Vec<&Arc<Container>> = v.containers.values().collect();
        cs.sort_by_key(|c| c.id);
        cs
    }
}

impl Default for Trie {
    fn default() -> Self {
        Self::new()
    }
}

impl Layout for Trie {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Trie
    }

    fn table_format(&self) -> u8 {
        crate::htable::FORMAT_HTABLE
    }

    fn empty_version(&self, tables: &Arc<TableCtx>) -> Arc<dyn LayoutVersion> {
        self.empty_version_with_key(tables, [0; 16])
    }

    fn empty_version_with_key(
        &self,
        _tables: &Arc<TableCtx>,
        hash_key: [u8; 16],
    ) -> Arc<dyn LayoutVersion> {
        Arc::new(TrieVersion::empty(
            self.shared.clone(),
            hash_key,
            TrieOptions::default().last_level_depth,
        ))
    }

    fn configure(&self, opts: &KeyspaceOptions) {
        self.shared.filter_budget.store(
            opts.trie.filter_memory_bytes,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.shared.set_cache_budget(opts.trie.cluster_cache_bytes);
    }

    fn init_records(&self, opts: &KeyspaceOptions, out: &mut KsEdit) {
        out.records.push(params_record(opts.trie.last_level_depth));
    }

    fn flush(
        &self,
        ctx: &JobCtx<'_>,
        _version: &Arc<dyn LayoutVersion>,
        mem: &Memtable,
    ) -> Result<KsEdit> {
        self.configure(ctx.opts);
        jobs::flush(ctx, &self.shared, mem)
    }

    fn pick(&self, version: &Arc<dyn LayoutVersion>, ctx: &JobCtx<'_>) -> Option<Box<dyn Job>> {
        let v = self.v(version)?;
        let o = &ctx.opts.trie;
        self.configure(ctx.opts);
        self.busy.lock().gc(v);
        let cs = Self::sorted(v);
        // 1. BloomClusters behind their piles (a lookup then costs one metadata read).
        for c in &cs {
            if self.needs_cluster(v, c) {
                if let Some(j) = self.cluster_job(v, c) {
                    return Some(j);
                }
            }
        }
        // 2. Full upper-level piles, fullest first, shallower first on ties.
        let mut full: Vec<&&Arc<Container>> = cs
            .iter()
            .filter(|c| c.depth < v.last_depth && c.pile.len() >= o.pile_size)
            .collect();
        full.sort_by(|a, b| b.pile.len().cmp(&a.pile.len()).then(a.depth.cmp(&b.depth)));
        for c in full {
            if let Some(j) = self.compaction_job(v, c) {
                return Some(j);
            }
        }
        // 3. Garbage collection of last-level containers over the threshold.
        for c in &cs {
            if self.needs_gc(v, c, o) {
                if let Some(j) = self.gc_job(v, c) {
                    return Some(j);
                }
            }
        }
        None
    }

    fn needs_compaction(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> bool {
        let Some(v) = self.v(version) else {
            return false;
        };
        let o = &opts.trie;
        v.containers.values().any(|c| {
            (c.depth < v.last_depth && c.pile.len() >= o.pile_size)
                || self.needs_cluster(v, c)
                || self.needs_gc(v, c, o)
        })
    }

    fn manual(
        &self,
        version: &Arc<dyn LayoutVersion>,
        ctx: &JobCtx<'_>,
        scope: &ManualScope,
    ) -> ManualStep {
        let Some(v) = self.v(version) else {
            return ManualStep::Done;
        };
        self.busy.lock().gc(v);
        let mut cs = Self::sorted(v);
        cs.sort_by_key(|c| (c.depth, c.id));
        // Push every upper container holding a table in scope down, shallowest first.
        if let Some(c) = cs.iter().find(|c| {
            c.depth < v.last_depth && c.pile.iter().any(|t| scope.contains(t.meta.file_no))
        }) {
            return match self.compaction_job(v, c) {
                Some(j) => ManualStep::Run(j),
                None => ManualStep::Wait,
            };
        }
        // Then merge in place every last-level pile with two or more generations in scope
        // (unless garbage collection is disabled); later generations may stay on top.
        let gc = ctx.opts.trie.gc_garbage_ratio > 0.0;
        if let Some(c) = cs.iter().find(|c| {
            gc && c.depth >= v.last_depth && c.generations_where(|t| scope.contains(t)) >= 2
        }) {
            return match self.gc_job(v, c) {
                Some(j) => ManualStep::Run(j),
                None => ManualStep::Wait,
            };
        }
        ManualStep::Done
    }

    fn pressure(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> Pressure {
        let n = self.v(version).map_or(0, |v| v.max_upper_pile);
        Pressure::of_backlog(n, opts.trie.slowdown_sublevels, opts.trie.stop_sublevels)
    }
}

/// Compaction of one upper-level container into its children.
struct CompactJob {
    cid: u64,
    inputs: Vec<Arc<TableFile>>,
    children: Vec<ChildInfo>,
    last_depth: u32,
    shared: Arc<Shared>,
    res: Reservation,
}

impl Job for CompactJob {
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let me = &mut *self;
        let e = jobs::compact_container(
            ctx,
            &me.shared,
            me.cid,
            &me.inputs,
            &me.children,
            me.last_depth,
        )?;
        succeed(&mut me.res, &e);
        Ok(e)
    }
}

/// Garbage collection of one last-level container.
struct GcJob {
    cid: u64,
    pile: Vec<Arc<TableFile>>,
    cluster: Option<Arc<ClusterRef>>,
    shared: Arc<Shared>,
    res: Reservation,
}

impl Job for GcJob {
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let me = &mut *self;
        let e = jobs::gc_container(ctx, &me.shared, me.cid, &me.pile, me.cluster.as_deref())?;
        succeed(&mut me.res, &e);
        Ok(e)
    }
}

/// BloomCluster rebuild of one last-level container.
struct ClusterJob {
    cid: u64,
    pile: Vec<Arc<TableFile>>,
    cluster: Option<Arc<ClusterRef>>,
    shared: Arc<Shared>,
    res: Reservation,
}

impl Job for ClusterJob {
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let me = &mut *self;
        let e = jobs::cluster_container(ctx, &me.shared, me.cid, &me.pile, me.cluster.as_deref())?;
        succeed(&mut me.res, &e);
        Ok(e)
    }
}
