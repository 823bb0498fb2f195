/*
 * arbiter.pml -- Promela model of the fence with the database as the arbiter of a lost app node
 * (issue 29 Part 2). See README.md next to it ("The arbiter"); fence.pml models the fence
 * itself (one home, two writer nodes, skip marks, pauses, drift, topology) and this model
 * reuses its ledger, renewal and reader, reduced to what the arbiter changes.
 *
 * One app node N that writes (the node that gets lost), two homes H0 and H1 (app nodes other
 * than N) each homing one page of the one database item N writes, one proxy with one cache entry
 * per page (reads are checked in every state: Reads(); NR misses refill the cache: Renders()),
 * the database holding the item's version, N's arbiter row (epoch, state in|out) and the track
 * table (home, N, epoch).
 *
 *   N's update:  BEGIN; SELECT state ... LOCK IN SHARE MODE (S lock on N's row, held until
 *                COMMIT); out: nothing written, the update fails; in: write, COMMIT (the S lock
 *                is released); later the invalidation is numbered (N's writer counter) and sent
 *                to both homes; the response returns when both acked, or at the fence bound.
 *   The drop:    a home in TRACK mode (it reads N's counter in its renewals) runs UPDATE row SET
 *                epoch = epoch + 1, state = out (X lock: waits until no transaction of N holds the
 *                S lock), then catches up (invalidate-all: registered pages bumped, renders begun
 *                before refused), then vouches in IGNORE mode: its renewals do not read N.
 *   Another home that sees the row out and has not registered at its epoch may ignore N too,
 *                after its own catch-up (none needed if it made one in this out period already).
 *   Re-admission: a home in IGNORE mode starts tracking N again (TRACK, rejoining: its next
 *                renewal's reading is a first reading, so a catch-up; N unreadable again before
 *                the home registered: back to IGNORE; a reading with a skip mark: the renewal
 *                vouches without N, as home_service.cc's Rejoining), then registers (home, N, epoch);
 *                when every home has registered at the current epoch, a transaction that checks
 *                the epoch and the registrations sets state = in (same epoch). A home registered
 *                at the current epoch that loses N must drop it again (bump) before it ignores it.
 *
 * The model allows more than coherence/home_service.cc does (so what it proves holds for the code
 * too): a home drops N whenever it cannot read it (the code: after drop_after_ms, and never while
 * rejoining), and a home that sees the row out may ignore N after a catch-up without a bump of
 * its own (the code always bumps); both are kept for the variants that show why the rules around
 * them are needed. Not modelled: the homes' own rows (a partition where each side drops the
 * other: the drop's S lock on the dropping home's own row, docs/coherence.md), topology changes,
 * drift and pauses (fence.pml), the database itself failing (a home that cannot reach it stays
 * fenced: it neither drops nor ignores).
 *
 * Time: one discrete clock rt, every node's (drift and pauses are fence.pml's; not here).
 *
 * Reachability probes: -DPROBE=k makes branch k assert false (listed below, at PROBE).
 *
 * Compile-time parameters (spin -a -DNAME=VALUE; check.sh --model arbiter has the configurations):
 *   LEASE, SKEW, BOUND, TMAX as in fence.pml (2, 1, LEASE + SKEW, 6)
 *   NWR     N's updates, one after the other (default 2, at most 3)
 *   NR      renders (misses that refill the cache) (default 1)
 *   PAGES   bit h set: home h's page is modelled (its renewals, hits and renders) (default 3);
 *           a home without renews nothing, it only applies, acknowledges and registers
 *   CUTS    bit h set: N may be cut off from home h (its invalidations to h and h's reads of its
 *           counter lost; N still reaches the database), once (default 1: H0)
 *   HEALS   bit h set: a cut between N and home h may heal, once (default CUTS)
 *   NCRASH  1: N may crash (the database aborts its open transaction; nobody reads its counter)
 *   CRASH   bit h set: home h may crash once and restart as a new incarnation (default 0)
 *   MARKS   bit h set: N may set a skip mark for home h (fence.pml's design B) (default 0)
 *   EMAX    the most drops (epoch bumps) in a run (default 2)
 *   OPERATOR  the fallback without the arbiter: an operator takes N out of home h's fence
 *           ("out N") once N cannot write any more (it crashed: NCRASH); there is no arbiter row
 *           and no drop. 1: as coherence/home_service.cc take_out() does it today (the home stops
 *           reading N, no catch-up); 2: with a catch-up. P1 only.
 *   CHECK_P1, CHECK_OUT, CHECK_DROP: the properties whose assertions are compiled in (default all):
 *     P1    no read that begins after an update's response returned is served an older version
 *     OUT   a node that is out never commits a write (asserted at N's COMMIT)
 *     DROP  a home vouches without reading N only after a drop whose bump committed after every
 *           write of N that committed before it, followed by its own catch-up (asserted at each
 *           renewal that does not read N)
 *
 * Variants (each a part of the design taken away; the ctest entries expect spin to find them):
 *   -DPLAIN_READ       (a) N's transaction reads its row without the S lock (a plain read)
 *   -DNO_DROP_CATCHUP  (b) the dropping home vouches without N right after the bump, no catch-up
 *   -DSELF_READMIT     (c) N, finding itself out, sets its row back to in on its own and writes
 *   -DKEPT_READING     a home that sees the row out and whose last renewal read N's counter after
 *                      the bump (holding every number up to it) ignores N without a catch-up
 *   -DREG_NO_BUMP      a home that registered at the current epoch goes back to ignoring N
 *                      without bumping the epoch
 *   -DREG_IN_MEMORY    a home knows it registered from its memory (lost when it restarts), not
 *                      from the track table
 *   -DDIRTY_RECORD     (MARKS) a rejoining home registers on a clean reading older than its last
 *                      renewal that vouched without N (its reading had a skip mark): that
 *                      renewal's cap outlives the re-admission, and N's updates skip the marked
 *                      home (coherence/home_service.cc before the fix: found by this model)
 *   -DFIRST_READ_NO_MARK  (MARKS) a home that tracks N again takes its first reading of N's
 *                      counter without its skip word for the home (the reading sets no cap, but
 *                      the home registers on it)
 * Also: -DOPERATOR=1 (above) is the operator's "out N" as built today; P1 fails.
 * Option:
 *   -DROW_CHECK        a renewal that does not read N reads N's row instead, and fails unless it
 *                      is out at the epoch at which this home last caught up (a row out at a new
 *                      epoch: the home catches up again first). Defence in depth against (c).
 */

#ifndef LEASE
#define LEASE 2
#endif
#ifndef SKEW
#define SKEW 1
#endif
#ifndef BOUND
#define BOUND (LEASE + SKEW)
#endif
#define GRACE (LEASE / 2)
#ifndef TMAX
#define TMAX 6
#endif
#ifndef NWR
#define NWR 2
#endif
#ifndef NR
#define NR 1
#endif
#ifndef PAGES
#define PAGES 3
#endif
#ifndef CUTS
#define CUTS 1
#endif
#ifndef HEALS
#define HEALS CUTS
#endif
#ifndef NCRASH
#define NCRASH 0
#endif
#ifndef CRASH
#define CRASH 0
#endif
#ifndef MARKS
#define MARKS 0
#endif
#ifndef EMAX
#define EMAX 2
#endif
#ifndef OPERATOR
#define OPERATOR 0
#endif
#if OPERATOR
#define ARBITER 0   /* the operator's fallback: no arbiter, no drops */
#else
#define ARBITER 1
#endif
#if NWR > 3
#error "at most 3 updates (numbers are bits 1..3 of a byte)"
#endif
#if !defined(CHECK_P1) && !defined(CHECK_OUT) && !defined(CHECK_DROP)
#define CHECK_P1
#define CHECK_OUT
#define CHECK_DROP
#endif

#ifdef PLAIN_READ
#define S_LOCK 0
#else
#define S_LOCK 1
#endif
#ifdef SELF_READMIT
#define SELF_IN 1
#else
#define SELF_IN 0
#endif
#ifdef KEPT_READING
#define KEPT 1
#else
#define KEPT 0
#endif

/* Reachability probes: -DPROBE=k makes branch k assert false:
 *   1 a hit that P1 constrains (an update returned) at a home that ignores N
 *   2 the same, on a page rendered after N's re-admission
 *   3 N commits a write after its re-admission
 *   4 N's update refused: its row is out
 *   5 a home goes back to ignoring N without a catch-up (it made one at this epoch)
 *   6 a home that sees the row out catches up and ignores N
 *   7 a home registered at the current epoch drops N again (bumps)
 *   8 a rejoining home loses N again before its record: back out, no catch-up
 *   9 a rejoining home vouches without N: its reading of N is not clean (a skip mark) */
#ifndef PROBE
#define PROBE 0
#endif
#define PROBE_AT(k) assert(PROBE != k)

#define NH 2          /* homes */
#define UP 0          /* a home's states */
#define DEAD 1
#define TRACK 0       /* a home's mode for N: its renewals read N's counter */
#define IGNORE 1      /* its renewals do not read N (N dropped, or seen out) */
#define NONE 255

#define BIT(n) (1 << (n))
#define UPTO(r) ((1 << ((r) + 1)) - 2) /* bits 1..r */

/* ---- the world ----------------------------------------------------------------------------- */
byte rt;            /* real time */
byte db;            /* the item's version in the database */

/* ---- the database: N's arbiter row, its locks, the track table ----------------------------- */
byte epoch;         /* N's row: epoch */
bool rin = 1;       /* N's row: state in (1) or out (0) */
bool sheld;         /* a transaction of N holds the S lock on the row (until its COMMIT) */
byte treg[NH];      /* the track table: home h registered at epoch treg[h] - 1 (0: never) */

/* ---- N ------------------------------------------------------------------------------------- */
bool nalive = 1;    /* N runs (a crash stops it for good, the database aborts its transaction) */
bool cut[NH];       /* N cut off from home h: its invalidations to h and h's reads of it lost */
byte ncut;          /* cuts so far (bit h) */
byte ctr;           /* N's writer counter */
byte inflight[NH];  /* invalidations on their way to home h (bit n): any order, any delay */
byte acked[NH];     /* home h acknowledged number n */
byte skipw[NH];     /* MARKS: N's skip word for home h: 0 none, m + 2 marked since time m */

/* ---- the homes (one page each: one slot, one registration) -------------------------------- */
byte hst[NH];       /* UP, DEAD */
byte hinc[NH];      /* incarnation */
byte ncrash;
byte slot[NH];      /* the page's version word */
byte rend;          /* the proxy renders page h - 1 (0: none): between seq_start and register */
bool moved;         /* that page's home's invalidation sequence moved since its seq_start (one
                     * reader: a flag stands for seq, which would count without bound) */
bool reg[NH];       /* the page is registered */
byte cap[NH];       /* vouching while rt < cap */
byte oinc[NH], oslot[NH], ocap[NH]; /* a dead incarnation's table (shm mappers, until its cap) */
byte mode[NH];      /* TRACK, IGNORE */
byte cuep[NH];      /* epoch + 1 at which h caught up after finding N's row out (0: none) */
bool rejoin[NH];    /* h tracks N again after ignoring it, and has not registered since
                     * (home_service.cc: ArbState::Rejoining) */
bool dirty[NH];     /* rejoining h's last renewal vouched without N (its reading had a skip mark):
                     * it registers only after a clean reading since (home_service.cc: covered) */
#ifdef REG_IN_MEMORY
byte myreg[NH];     /* epoch + 1 at which h registered, as h remembers it (lost at a restart) */
#define REGD(h) (myreg[h] == epoch + 1)
#else
#define REGD(h) (treg[h] == epoch + 1)   /* read from the track table */
#endif
#ifdef FIRST_READ_NO_MARK
bool rdmark[NH];    /* the first reading in progress found a skip mark for h, and went on */
#endif
#if KEPT
byte okep[NH];      /* epoch + 1: the last renewal read N while the row was out at that epoch */
byte rdout[NH];     /* the same, of the reading in progress */
#endif
/* the ledger for origin N (fence.pml's, one origin) */
bool tracked[NH];
byte cov[NH];
byte above[NH];
byte nabove[NH];
/* the renewal in progress (TRACK mode) */
byte rph[NH];       /* 0 idle, 1 read: checking the standing (waiting up to the grace) */
byte treq[NH];
byte rd[NH];

/* ---- the proxy's cache entries, one per page ------------------------------------------------ */
bool cvalid[NH];
byte cpv[NH];       /* the database version the page was rendered from */
byte ctinc[NH], ctslot[NH];

/* ---- ghosts ------------------------------------------------------------------------------- */
byte retv;          /* P1: highest version of an update whose response returned */
bool nwout;         /* DROP: N committed a write since the last bump */
bool hcaught[NH];   /* DROP: since a bump that came after N's last commit, h caught up, and since
                     * then N committed nothing and the row was not set in */
byte dn;            /* scratch: set, used and reset within one atomic step */

#define READABLE(h) (nalive && !cut[h])
#define VOUCHING(h) (cap[h] > rt)
#ifdef CHECK_P1
#define ASSERT_P1(pv, nd) assert(pv >= nd)
#else
#define ASSERT_P1(pv, nd) skip
#endif
#ifdef CHECK_OUT
#define ASSERT_OUT assert(rin)
#else
#define ASSERT_OUT skip
#endif
#ifdef CHECK_DROP
#define ASSERT_DROP(h) assert(hcaught[h])
#else
#define ASSERT_DROP(h) skip
#endif

/* ---- the page's home state ------------------------------------------------------------------ */
#define APPLY(h) \
  if \
  :: reg[h] -> slot[h]++; reg[h] = 0 \
  :: else -> skip \
  fi; \
  if \
  :: rend == h + 1 -> moved = 1 \
  :: else -> skip \
  fi

/* A catch-up: an invalidate-all made now (pages registered bumped, renders begun before
 * refused: seq moves). The ghost notes one made while the row is out since a bump after N's
 * last commit. */
#define CATCHUP(h) \
  APPLY(h); \
  if \
  :: !rin && !nwout -> hcaught[h] = 1 \
  :: else -> skip \
  fi

/* ---- the ledger (coherence/ledger.cc; fence.pml) -------------------------------------------- */
#define NEEDED(h, n) \
  ((!tracked[h] && !(nabove[h] & BIT(n))) || (tracked[h] && n > cov[h] && !(above[h] & BIT(n))))

#define ADVANCE(h) \
  do \
  :: above[h] & BIT(cov[h] + 1) -> above[h] = above[h] & ~BIT(cov[h] + 1); cov[h]++ \
  :: else -> break \
  od

#define LEDGER_APPLIED(h, n) \
  if \
  :: !tracked[h] -> nabove[h] = nabove[h] | BIT(n) \
  :: tracked[h] && n > cov[h] -> above[h] = above[h] | BIT(n); ADVANCE(h) \
  :: else -> skip \
  fi

#define COVER(h, r) \
  if \
  :: !tracked[h] -> above[h] = nabove[h]; nabove[h] = 0; cov[h] = 0; tracked[h] = 1 \
  :: else -> skip \
  fi; \
  if \
  :: r > cov[h] -> cov[h] = r \
  :: else -> skip \
  fi; \
  above[h] = above[h] & ~UPTO(cov[h]); \
  ADVANCE(h)

/* The home stops tracking N: the next reading will be a first reading. */
#define FORGET(h) tracked[h] = 0; cov[h] = 0; above[h] = 0; nabove[h] = 0

#define UNKNOWN(h) (!tracked[h])
#define BEHIND(h) (tracked[h] && rd[h] > cov[h])

#if KEPT
#define RESET_RENEWAL(h) rph[h] = 0; treq[h] = 0; rd[h] = 0; rdout[h] = 0
#else
#define RESET_RENEWAL(h) rph[h] = 0; treq[h] = 0; rd[h] = 0
#endif

#define SET_CAP(h, t) \
  if \
  :: (t) + LEASE > cap[h] -> cap[h] = (t) + LEASE \
  :: else -> skip \
  fi

/* The renewal's reading of N's region: its counter, and (MARKS) its skip word for h. */
#define MARK_SEEN(h) ((MARKS & BIT(h)) && skipw[h] != 0)

/* ---- home h receives invalidation n of N (HomeService::on_invalidate) ----------------------- */
#define DELIVER(h) \
  atomic { \
    hst[h] == UP && !cut[h] && inflight[h] != 0 -> \
    if \
    :: inflight[h] & BIT(1) -> dn = 1 \
    :: inflight[h] & BIT(2) -> dn = 2 \
    :: inflight[h] & BIT(3) -> dn = 3 \
    fi; \
    inflight[h] = inflight[h] & ~BIT(dn); \
    if \
    :: NEEDED(h, dn) -> APPLY(h); LEDGER_APPLIED(h, dn); \
       printf("MSC: t%d H%d: applies N's #%d and acks (slot %d)\n", rt, h, dn, slot[h]) \
    :: else -> printf("MSC: t%d H%d: holds N's #%d already: acks\n", rt, h, dn) \
    fi; \
    acked[h] = acked[h] | BIT(dn); \
    dn = 0 \
  }

proctype Home(byte h) {
end:
  do
  /* ---- the fence, TRACK mode (fence.pml): note t_req and read N's region, then check ---- */
  :: atomic {
       (PAGES & BIT(h)) && hst[h] == UP && mode[h] == TRACK && rph[h] == 0 && READABLE(h) &&
#ifdef FIRST_READ_NO_MARK
       (!MARK_SEEN(h) || !tracked[h]) ->
       rdmark[h] = MARK_SEEN(h);
#else
       !MARK_SEEN(h) ->
#endif
       treq[h] = rt; rd[h] = ctr; rph[h] = 1;
#if KEPT
       if
       :: !rin -> rdout[h] = epoch + 1
       :: else -> skip
       fi;
#endif
       printf("MSC: t%d H%d: renewal, reads N's counter %d\n", rt, h, rd[h])
     }
  :: atomic {
       hst[h] == UP && mode[h] == TRACK && rph[h] == 1 &&
       (UNKNOWN(h) || !BEHIND(h) || rt >= treq[h] + GRACE) ->
       if
       :: UNKNOWN(h) || BEHIND(h) ->
          printf("MSC: t%d H%d: CATCH-UP (first reading %d; read %d, covered %d)\n", rt, h,
                 UNKNOWN(h), rd[h], cov[h]);
          CATCHUP(h);
          COVER(h, rd[h])
       :: else ->
#if KEPT
          okep[h] = rdout[h];
#endif
          skip
       fi;
#ifdef FIRST_READ_NO_MARK
       if
       :: rdmark[h] -> rdmark[h] = 0; /* a first reading of the counter alone: no cap */
          printf("MSC: t%d H%d: first reading, N's skip word for H%d not read (it is set)\n", rt,
                 h, h)
       :: else -> SET_CAP(h, treq[h]); printf("MSC: t%d H%d: cap %d (reading N)\n", rt, h, cap[h])
       fi;
#else
       SET_CAP(h, treq[h]);
       printf("MSC: t%d H%d: cap %d (reading N)\n", rt, h, cap[h]);
#endif
       dirty[h] = 0;
       RESET_RENEWAL(h)
     }
  /* A home whose page is not modelled (PAGES) renews nothing; it still takes a first reading of
   * N when it tracks N again (so that it may register). */
  :: atomic {
       !(PAGES & BIT(h)) && hst[h] == UP && mode[h] == TRACK && !tracked[h] && READABLE(h) &&
       !MARK_SEEN(h) ->
       COVER(h, ctr);
       printf("MSC: t%d H%d: first reading of N's counter %d (catch-up)\n", rt, h, cov[h])
     }
  /* ---- the fence, IGNORE mode: the renewal does not read N (the other origins, not modelled,
   * are read and current: one step) ---- */
  :: atomic {
       (PAGES & BIT(h)) && hst[h] == UP && mode[h] == IGNORE &&
#ifdef ROW_CHECK
       !rin && cuep[h] == epoch + 1 && /* and it reads N's row: out, at the epoch it caught up at */
#endif
       1 ->
#if ARBITER
       ASSERT_DROP(h);
#endif
       SET_CAP(h, rt);
       printf("MSC: t%d H%d: cap %d WITHOUT reading N\n", rt, h, cap[h])
     }
#ifdef ROW_CHECK
  /* The row is out at another epoch than the one this home caught up at: catch up again. */
  :: atomic {
       (PAGES & BIT(h)) && hst[h] == UP && mode[h] == IGNORE && !rin && cuep[h] != epoch + 1 ->
       CATCHUP(h); cuep[h] = epoch + 1;
       printf("MSC: t%d H%d: row out at epoch %d (a new epoch): CATCH-UP\n", rt, h, epoch)
     }
#endif
  /* ---- invalidations: delivered when N is not cut off from h, or lost ---- */
  :: DELIVER(h)
  /* ---- the drop: UPDATE row SET epoch = epoch + 1, state = out, by a home that cannot read N
   * (for drop_after_ms in the design; any time it cannot in the model). The X lock waits for N's
   * S lock: the bump is one step once that is free (the X lock is held only by this step). Then
   * the catch-up: in the same step here (between the two nothing of N commits, the home's other
   * actions only get bumped by the catch-up, and reads still see its old cap, a TRACK one). ---- */
  :: atomic {
       ARBITER && hst[h] == UP && mode[h] == TRACK && !READABLE(h) && !sheld && epoch < EMAX ->
#if PROBE
       if
       :: REGD(h) -> PROBE_AT(7) /* a home registered at the current epoch drops N again */
       :: else -> skip
       fi;
#endif
       epoch++; rin = 0; nwout = 0;
       RESET_RENEWAL(h); FORGET(h); rejoin[h] = 0; dirty[h] = 0;
       printf("MSC: t%d H%d: DROPS N: bump committed, row (epoch %d, out)\n", rt, h, epoch);
#ifndef NO_DROP_CATCHUP
       CATCHUP(h); cuep[h] = epoch + 1;
       printf("MSC: t%d H%d: CATCH-UP after the bump (slot %d)\n", rt, h, slot[h]);
#endif
       mode[h] = IGNORE
     }
  /* ---- a home that sees N's row out and has not registered at its epoch: ignores N (a
   * catch-up first, unless it made one in this out period at this epoch). ---- */
  :: atomic {
       ARBITER && hst[h] == UP && mode[h] == TRACK && !READABLE(h) && !rin &&
#ifndef REG_NO_BUMP
       !REGD(h) &&
#endif
       1 ->
       if
       :: cuep[h] == epoch + 1 -> PROBE_AT(5);
          printf("MSC: t%d H%d: row out at epoch %d: ignores N (caught up already)\n", rt, h,
                 epoch)
#if KEPT
       :: cuep[h] != epoch + 1 && okep[h] == epoch + 1 ->
          printf("MSC: t%d H%d: row out at epoch %d: ignores N, no catch-up (it kept reading)\n",
                 rt, h, epoch)
#endif
       :: else ->
          CATCHUP(h); cuep[h] = epoch + 1; PROBE_AT(6);
          printf("MSC: t%d H%d: row out at epoch %d: CATCH-UP, ignores N\n", rt, h, epoch)
       fi;
       mode[h] = IGNORE; rejoin[h] = 0; dirty[h] = 0; FORGET(h); RESET_RENEWAL(h)
     }
#if OPERATOR
  /* ---- the operator's "out N" at home h, once N cannot write (it crashed) ---- */
  :: atomic {
       hst[h] == UP && mode[h] == TRACK && !nalive ->
#if OPERATOR == 2
       CATCHUP(h);
       printf("MSC: t%d H%d: operator: out N; CATCH-UP, ignores N\n", rt, h);
#else
       printf("MSC: t%d H%d: operator: out N; ignores N (no catch-up)\n", rt, h);
#endif
       mode[h] = IGNORE; FORGET(h); RESET_RENEWAL(h)
     }
#endif
  /* ---- re-admission: start tracking N again (a first reading: its catch-up), register ---- */
  :: atomic {
       ARBITER && hst[h] == UP && mode[h] == IGNORE && READABLE(h) ->
       mode[h] = TRACK; rejoin[h] = 1;
       printf("MSC: t%d H%d: tracks N again (rejoining)\n", rt, h)
     }
  /* Rejoining, as home_service.cc does it: N unreadable again before this home registered: back
   * to ignoring it, no catch-up (the row cannot have been in since this home's catch-up: it
   * needs this home's registration); a reading that is not clean (a skip mark) is skipped, and
   * the renewal vouches without N. */
  :: atomic {
       ARBITER && hst[h] == UP && mode[h] == TRACK && rejoin[h] && !READABLE(h) ->
       PROBE_AT(8);
       mode[h] = IGNORE; rejoin[h] = 0; dirty[h] = 0; FORGET(h); RESET_RENEWAL(h);
       printf("MSC: t%d H%d: N unreadable again before its registration: stays out\n", rt, h)
     }
  :: atomic {
       ARBITER && (PAGES & BIT(h)) && hst[h] == UP && mode[h] == TRACK && rejoin[h] &&
       READABLE(h) && MARK_SEEN(h) && rph[h] == 0 ->
       PROBE_AT(9);
       ASSERT_DROP(h);
       SET_CAP(h, rt); dirty[h] = 1;
       printf("MSC: t%d H%d: rejoining, N's reading not clean (skip mark): cap %d without N\n",
              rt, h, cap[h])
     }
  :: atomic {
       ARBITER && hst[h] == UP && mode[h] == TRACK && tracked[h] && READABLE(h) && !rin &&
#ifndef DIRTY_RECORD
       !dirty[h] &&
#endif
       treg[h] != epoch + 1 ->
       treg[h] = epoch + 1; rejoin[h] = 0;
#ifdef REG_IN_MEMORY
       myreg[h] = epoch + 1;
#endif
       printf("MSC: t%d H%d: registers (H%d, N, epoch %d)\n", rt, h, h, epoch)
     }
  /* ---- crash and restart (CRASH): the new incarnation waits out its predecessor's lease,
   * starts fenced with an empty ledger, in TRACK mode; what it registered stays in the track
   * table (REG_IN_MEMORY: it forgets). ---- */
  :: atomic {
       (CRASH & BIT(h)) && ncrash == 0 && hst[h] == UP -> hst[h] = DEAD; ncrash++;
       RESET_RENEWAL(h);
       printf("MSC: t%d H%d: CRASH (cap %d)\n", rt, h, cap[h])
     }
  :: atomic {
       hst[h] == DEAD && rt >= cap[h] ->
       oinc[h] = hinc[h]; oslot[h] = slot[h]; ocap[h] = cap[h];
       hinc[h]++; slot[h] = 0; reg[h] = 0; cap[h] = 0;
       FORGET(h); mode[h] = TRACK; cuep[h] = 0; hcaught[h] = 0; rejoin[h] = 0; dirty[h] = 0;
#ifdef REG_IN_MEMORY
       myreg[h] = 0;
#endif
#if KEPT
       okep[h] = 0;
#endif
       hst[h] = UP;
       printf("MSC: t%d H%d: restarted, incarnation %d, fenced\n", rt, h, hinc[h])
     }
  od
}

/* ---- N: its updates, one after the other ----------------------------------------------------- */
#define RETURN_CONFIRMED(v) \
  if \
  :: v > retv -> retv = v \
  :: else -> skip \
  fi

#define EXCLUDED(h) ((MARKS & BIT(h)) && skipw[h] >= 2 && rt >= skipw[h] - 2 + BOUND)
#define SETTLED(h) ((excl & BIT(h)) || (acked[h] & BIT(n)))

proctype Writer() {
  byte k, n, tn, v, excl, marked;
  bool refused;
  do
  :: k < NWR ->
     /* BEGIN; SELECT state FROM arbiter WHERE node = N LOCK IN SHARE MODE (PLAIN_READ: no
      * lock). In: the S lock is held until COMMIT. Out: nothing is written, the update fails. */
     atomic {
       nalive ->
       if
       :: rin -> sheld = S_LOCK;
          printf("MSC: t%d N: BEGIN, reads its row: in (epoch %d; S lock %d)\n", rt, epoch, S_LOCK)
       :: !rin && SELF_IN -> /* (c): sets itself in, and writes */
          rin = 1; hcaught[0] = 0; hcaught[1] = 0; sheld = 1;
          printf("MSC: t%d N: BEGIN, reads its row: out (epoch %d): SETS ITSELF IN\n", rt, epoch)
       :: !rin && !SELF_IN -> refused = 1; PROBE_AT(4);
          printf("MSC: t%d N: BEGIN, reads its row: out (epoch %d): update refused\n", rt, epoch)
       fi
     }
     if
     :: refused -> atomic { k++; refused = 0 }
     :: else ->
        /* The write and COMMIT: the version becomes visible, the S lock is released. */
        atomic {
          nalive ->
          ASSERT_OUT;
#if PROBE
          if
          :: epoch > 0 && rin -> PROBE_AT(3) /* a write after N's re-admission */
          :: else -> skip
          fi;
#endif
          db++; v = db; sheld = 0;
          nwout = 1; hcaught[0] = 0; hcaught[1] = 0;
          printf("MSC: t%d N: COMMIT v%d (row in %d, epoch %d)\n", rt, v, rin, epoch)
        }
        /* Numbered (fetch-add on the writer counter), then sent to each home (MARKS: unless
         * excluded). A step of its own: the response's first output may leave long after the
         * COMMIT. */
        atomic {
          nalive ->
          ctr++; n = ctr; tn = rt;
          if
          :: EXCLUDED(0) -> excl = excl | BIT(0)
          :: else -> inflight[0] = inflight[0] | BIT(n)
          fi;
          if
          :: EXCLUDED(1) -> excl = excl | BIT(1)
          :: else -> inflight[1] = inflight[1] | BIT(n)
          fi;
          printf("MSC: t%d N: v%d numbered #%d, sent (excluded: %d)\n", rt, v, n, excl)
        }
        do
        :: atomic {
             nalive && SETTLED(0) && SETTLED(1) -> RETURN_CONFIRMED(v);
             printf("MSC: t%d N: update v%d RETURNS (acked or excluded)\n", rt, v); break
           }
        :: atomic {
             nalive && rt >= tn + BOUND && !(SETTLED(0) && SETTLED(1)) -> RETURN_CONFIRMED(v);
             printf("MSC: t%d N: update v%d RETURNS at the bound\n", rt, v); break
           }
#if MARKS
        /* Half the bound without a home's ack: mark it (CAS(0 -> now); one step). */
        :: atomic {
             (MARKS & BIT(0)) && nalive && rt >= tn + BOUND / 2 && !(marked & BIT(0)) &&
             !SETTLED(0) ->
             marked = marked | BIT(0);
             if
             :: skipw[0] == 0 -> skipw[0] = rt + 2;
                printf("MSC: t%d N: skip mark for H0 set (since %d)\n", rt, rt)
             :: else -> skip
             fi
           }
        :: atomic {
             (MARKS & BIT(1)) && nalive && rt >= tn + BOUND / 2 && !(marked & BIT(1)) &&
             !SETTLED(1) ->
             marked = marked | BIT(1);
             if
             :: skipw[1] == 0 -> skipw[1] = rt + 2;
                printf("MSC: t%d N: skip mark for H1 set (since %d)\n", rt, rt)
             :: else -> skip
             fi
           }
#endif
        od;
        atomic { k++; n = 0; tn = 0; v = 0; excl = 0; marked = 0 }
     fi
  :: k == NWR -> break
  od
}

#if MARKS
/* N's writer agent: a marked home that answers (not cut off, up) is cleared. */
proctype Agent() {
end:
  do
  :: atomic { nalive && skipw[0] >= 2 && hst[0] == UP && !cut[0] -> skipw[0] = 0;
              printf("MSC: t%d N's agent: H0 answers, mark cleared\n", rt) }
  :: atomic { nalive && skipw[1] >= 2 && hst[1] == UP && !cut[1] -> skipw[1] = 0;
              printf("MSC: t%d N's agent: H1 answers, mark cleared\n", rt) }
  od
}
#endif

/* ---- the network, N's crash, and the re-admission transaction -------------------------------- */
proctype World() {
end:
  do
  :: atomic { (CUTS & BIT(0)) && !(ncut & BIT(0)) -> cut[0] = 1; ncut = ncut | BIT(0);
              printf("MSC: t%d N CUT OFF from H0\n", rt) }
  :: atomic { (CUTS & BIT(1)) && !(ncut & BIT(1)) -> cut[1] = 1; ncut = ncut | BIT(1);
              printf("MSC: t%d N CUT OFF from H1\n", rt) }
  :: atomic { (HEALS & BIT(0)) && cut[0] -> cut[0] = 0; printf("MSC: t%d N and H0 healed\n", rt) }
  :: atomic { (HEALS & BIT(1)) && cut[1] -> cut[1] = 0; printf("MSC: t%d N and H1 healed\n", rt) }
  :: atomic { NCRASH && nalive -> nalive = 0; sheld = 0; /* its transaction aborted */
              printf("MSC: t%d N CRASHES\n", rt) }
  /* A home's transaction: the row is out at epoch e and every home registered at e: in. */
  :: atomic {
       !rin && treg[0] == epoch + 1 && treg[1] == epoch + 1 ->
       rin = 1; hcaught[0] = 0; hcaught[1] = 0;
       printf("MSC: t%d a home RE-ADMITS N: row (epoch %d, in)\n", rt, epoch)
     }
  od
}

/* ---- the proxy: hits, and renders that refill its cache --------------------------------------
 * A hit is decide_hit: the tag's incarnation's table vouches and its slot equals the tag (or a
 * dead incarnation's table, read by an shm mapper until its cap). A read begins and decides in
 * one step (fence.pml), and a hit changes nothing; so P1 is checked as an invariant of every
 * state: if page h would be a hit now, it was rendered from at least the version of every update
 * that has returned (Reads() asserts it in every state). Only the misses change the state:
 * Renders() does NR of them, each at either page. */
#define HIT(h) \
  (cvalid[h] && ((ctinc[h] == hinc[h] && VOUCHING(h) && ctslot[h] == slot[h]) || \
                 (ctinc[h] == oinc[h] && ocap[h] > rt && ctslot[h] == oslot[h])))
#define SERVED_OK(h) (!HIT(h) || cpv[h] >= retv)

proctype Reads() {
end:
  do
  :: atomic {
       (PAGES & BIT(0)) && !SERVED_OK(0) ->
       printf("MSC: t%d reader: HIT at H0, page v%d (updates returned: up to v%d)\n", rt, cpv[0],
              retv);
       ASSERT_P1(cpv[0], retv)
     }
  :: atomic {
       (PAGES & BIT(1)) && !SERVED_OK(1) ->
       printf("MSC: t%d reader: HIT at H1, page v%d (updates returned: up to v%d)\n", rt, cpv[1],
              retv);
       ASSERT_P1(cpv[1], retv)
     }
#if PROBE
  :: atomic { HIT(0) && retv > 0 && mode[0] == IGNORE -> PROBE_AT(1) } /* P1 constrains a hit
                                                                        * at a home ignoring N */
  :: atomic { HIT(0) && retv > 0 && cpv[0] > 0 && epoch > 0 && rin -> PROBE_AT(2) } /* a hit
                                                     * on a page rendered after a re-admission */
#endif
  od
}

proctype Renders() {
  byte k, h, pv, sinc;
  bool ok;
  do
  :: k < NR ->
     /* A miss at page h: seq_start (refused by a home that does not vouch), then the render reads
      * the database: one step (a render that reads later gets a newer version). */
     atomic {
       if
       :: PAGES & BIT(0) -> h = 0
       :: PAGES & BIT(1) -> h = 1
       fi;
       if
       :: hst[h] == UP && VOUCHING(h) -> rend = h + 1; moved = 0; sinc = hinc[h]; ok = 1
       :: else -> ok = 0
       fi;
       pv = db
     }
     /* coherence.register (refused: Fenced, OtherIncarnation, Race), and the proxy's store */
     atomic {
       if
       :: ok && hst[h] == UP && VOUCHING(h) && hinc[h] == sinc && !moved ->
          reg[h] = 1; cvalid[h] = 1; cpv[h] = pv; ctinc[h] = sinc; ctslot[h] = slot[h];
          printf("MSC: t%d reader: rendered v%d, registered at H%d and stored\n", rt, pv, h)
       :: else -> skip
       fi;
       k++; h = 0; pv = 0; sinc = 0; ok = 0; rend = 0; moved = 0
     }
  :: k == NR -> break
  od
}

proctype Clock() {
  do
  :: atomic { rt < TMAX -> rt++; printf("MSC: ---- tick: t%d\n", rt) }
  :: rt == TMAX -> break
  od
}

init {
  atomic {
    /* A steady state: row (0, in); both homes track N (counter 0 covered), vouch until LEASE;
     * both pages, version 0, registered and cached. */
    hinc[0] = 1; hinc[1] = 1;
    oinc[0] = NONE; oinc[1] = NONE;
    tracked[0] = 1; tracked[1] = 1;
    cap[0] = LEASE; cap[1] = LEASE;
    reg[0] = 1; reg[1] = 1;
    cvalid[0] = 1; ctinc[0] = 1; cvalid[1] = 1; ctinc[1] = 1;
    run Clock();
    run World();
    run Home(0);
    run Home(1);
    run Writer();
#ifdef CHECK_P1
    run Reads();
#endif
#if NR > 0
    run Renders();
#endif
#if MARKS
    run Agent();
#endif
  }
}
