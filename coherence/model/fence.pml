/*
 * fence.pml -- Promela model of the coherence fence (docs/coherence.md "An update", "The rule:
 * every home applied it, or is fenced", "A miss", "A hit"), with the changes of issue 29 (writer
 * digest and skip marks, a home that applies and acknowledges every invalidation, the ledger
 * fix, the pause check). See README.md next to it.
 *
 * One page of one item, homed at home H. Two writer nodes W0 and W1 (app nodes other than H;
 * H's own node writes like any other and is not modelled), one proxy with one cache entry and
 * one reader doing NR reads one after the other, a database holding the item's version.
 *
 * Time: a global discrete clock rt (real time, and the clock of every node but H's), and H's
 * own clock hc. hc stands still while H's host is paused (a VM stop: CLOCK_MONOTONIC does not
 * advance), and may lag rt by up to DRIFT ticks otherwise (rate drift over the run).
 *
 * Compile-time parameters (spin -a -DNAME=VALUE; give the same flags to spin -t for a trail;
 * check.sh has the configurations that are verified):
 *   LEASE  the fence lease in ticks (default 2); the grace is LEASE/2
 *   SKEW   clock_skew in ticks (default 1); BOUND = LEASE + SKEW unless given
 *   TMAX   the last tick (default 6): time stops there, the runs are bounded
 *   W0N, W1N  updates by W0 and W1, each one after the other (default 2 and 0; at most 3)
 *   NR     reads by the reader (default 1)
 *   DUP    1: an invalidation may be delivered twice (default 0). Loss and delay are always on:
 *          a message is delivered at any later time, or never (lost)
 *   MARKERS  bit w set: writer node w may set a skip mark (default 3: both)
 *   STEADY 1: the run starts with H vouching and the page registered and cached (default 1)
 *   DRIFT  how far H's clock may lag real time, pauses aside (default 0; at most SKEW)
 *   CRASH  1: H may crash once and restart as a new incarnation (default 0)
 *   PAUSE  1: H's host may be paused once (default 0)
 *   TOPO   1: W1 is a node added to the topology that H does not know (H does not read its
 *          counter, W1's digest differs); W0 runs H's topology or the new one (either)
 *   CHECK_P1, CHECK_P2  which property's assertion is checked (default: both)
 *
 * The logic of issue 29 (design-29 B, C, D and the pause check) is the default. Switches give
 * back today's behaviour, one at a time (-DTODAY: all of them):
 *   -DOLD_TOPOLOGY_DROP   a home drops an invalidation whose digest differs (no apply, no ack),
 *                         an unknown origin's is applied but not acknowledged, the renewal does
 *                         not look at writer digests, a writer returns after the bound as if
 *                         every home were fenced (path 1). P1 fails.
 *   -DOLD_LEDGER_UNKNOWN  standing() answers Unknown when the number read < covered (path 3).
 *                         P2 fails.
 *   -DNO_SKIP_MARKS       no skip marks (today): writers always wait for H (up to the bound).
 *   -DPAUSE_UNCHECKED     a home vouches from its cap after a pause (path 2). P1 fails.
 * More negative controls (each must fail P1):
 *   -DNO_UNCONFIRMED      the new home logic, but a writer whose topology differs from H's
 *                         returns after the bound without H's ack as confirmed.
 *   -DNO_LEASE_WAIT       a restarted home does not wait out its predecessor's lease.
 *   -DBOUND=LEASE         the bound without the clock skew (with DRIFT=1).
 *   -DMARK_UNCHECKED      writers exclude a marked home, but the home's renewal ignores marks.
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
#ifndef DRIFT
#define DRIFT 0
#endif
#define GRACE (LEASE / 2)
#ifndef TMAX
#define TMAX 6
#endif
#ifndef W0N
#define W0N 2
#endif
#ifndef W1N
#define W1N 0
#endif
#ifndef NR
#define NR 1
#endif
#ifndef DUP
#define DUP 0
#endif
#ifndef MARKERS
#define MARKERS 3
#endif
#ifndef CRASH
#define CRASH 0
#endif
#ifndef PAUSE
#define PAUSE 0
#endif
#ifndef TOPO
#define TOPO 0
#endif
#ifndef STEADY
#define STEADY 1
#endif
#if W0N > 3 || W1N > 3
#error "at most 3 updates per writer (numbers are bits 1..3 of a byte)"
#endif
#if !defined(CHECK_P1) && !defined(CHECK_P2)
#define CHECK_P1
#define CHECK_P2
#endif

#ifdef TODAY
#define OLD_TOPOLOGY_DROP
#define OLD_LEDGER_UNKNOWN
#define NO_SKIP_MARKS
#define PAUSE_UNCHECKED
#endif

#ifdef OLD_TOPOLOGY_DROP
#define OLD_TOPO 1
#else
#define OLD_TOPO 0
#endif
#ifdef OLD_LEDGER_UNKNOWN
#define OLD_LEDGER 1
#else
#define OLD_LEDGER 0
#endif
#ifdef NO_SKIP_MARKS
#define MARKS 0
#else
#define MARKS 1
#endif
#ifdef NO_UNCONFIRMED
#define UNCONFIRMED 0
#else
#define UNCONFIRMED (!OLD_TOPO)
#endif
#ifdef NO_LEASE_WAIT
#define LEASE_WAIT 0
#else
#define LEASE_WAIT 1
#endif

/* Reachability probes (README.md): -DPROBE=k makes branch k assert false. */
#ifndef PROBE
#define PROBE 0
#endif
#define PROBE_AT(k) assert(PROBE != k)

#define NW 2          /* writer nodes */
#define UP 0          /* H's states */
#define PAUSED 1
#define DEAD 2
#define PENDING 1     /* skip word: 0 none, 1 being set, m + 2: set since time m */
#define NONE 255

#define BIT(n) (1 << (n))
#define UPTO(r) ((1 << ((r) + 1)) - 2) /* bits 1..r */

/* ---- the world ------------------------------------------------------------------------- */
byte rt;          /* real time: the clock of the writers and the proxy */
byte hc;          /* H's clock (CLOCK_MONOTONIC of its host) */
byte drift;       /* how far hc lags rt by drift (at most SKEW), pauses aside */
byte db;          /* the item's version in the database */

/* ---- writer nodes ---------------------------------------------------------------------- */
byte ctr[NW];       /* the writer counter: numbers issued (one incarnation of the region) */
byte inflight[NW];  /* invalidations on their way to H, by number (bit n): any order, any delay */
byte acked[NW];     /* H acknowledged number n (the tag in its cell) */
byte skipw[NW];     /* the skip word for H in the writer region */
bool wnew[NW];      /* the writer's topology digest differs from H's */
bool known[NW];     /* H's topology lists the writer node (H reads its counter) */

/* ---- the home H (one page: one slot, one registration, one dependency) ------------------ */
byte hst;           /* UP, PAUSED, DEAD */
byte hinc = 1;      /* incarnation: a tag or seq_start of another incarnation never matches */
byte slot;          /* the page's version word */
byte seq;           /* the invalidation sequence (every invalidation touches the one item) */
bool reg;           /* the page is registered (dep -> key) */
byte cap;           /* the fence cap, on hc; vouching while hc < cap */
byte cappc;         /* pause count when the renewal that set cap took t_req */
byte pauses;        /* pauses detected (counted at resume) */
byte ncrash;
byte oinc = NONE, oslot, ocap, opc; /* the predecessor's table (shm mappers read it until its lease) */
/* the ledger, per origin */
bool tracked[NW];   /* an incarnation of the origin's counter is tracked (a reading was covered) */
byte cov[NW];       /* covered */
byte above[NW];     /* applied above covered (bits) */
byte nabove[NW];    /* applied before the first reading (next_above) */
/* the renewal in progress */
byte rph;           /* 0 idle, 1 read: checking the standing (waiting up to the grace) */
byte treq, rpc;
byte rd[NW];        /* numbers read */

/* ---- the proxy's cache entry ----------------------------------------------------------- */
bool cvalid;
byte cpv;           /* the page's content: the database version it was rendered from */
byte ctinc, ctslot; /* its tag */

/* ---- ghosts ---------------------------------------------------------------------------- */
byte retv;          /* highest version of an update whose response returned (confirmed) */
#if PROBE
byte exclv;         /* probes: the version of an update that returned with H excluded */
#endif
byte got[NW];       /* P2: numbers this incarnation of H applied or covered by a catch-up */
bool caught[NW];    /* P2: this incarnation of H made a catch-up that covered a reading of w */
byte dn;            /* scratch: set, used and reset to 0 within one atomic step */
byte unk, beh, just, need; /* scratch, likewise */

#ifdef PAUSE_UNCHECKED
#define VOUCH(c, pc) ((c) > hc)
#else
/* After a resume, a cap whose renewal took t_req before the pause is treated as passed. */
#define VOUCH(c, pc) ((c) > hc && (pc) == pauses)
#endif
#define VOUCHING VOUCH(cap, cappc)

#define SAME(w) (!wnew[w])
#define MAY_MARK(w) (MARKS && SAME(w) && (MARKERS & BIT(w)))
#define EXCLUDED(w) (MAY_MARK(w) && skipw[w] >= 2 && rt >= skipw[w] - 2 + BOUND)
/* The renewal's reading of a writer region that makes the origin not current. */
#ifdef MARK_UNCHECKED
#define MARK_SEEN(w) 0
#else
#define MARK_SEEN(w) (MARKS && skipw[w] != 0)
#endif
#define NOT_CURRENT(w) (MARK_SEEN(w) || (!OLD_TOPO && wnew[w] && ctr[w] > 0))

/* P1: a read that began after an update returned gets a page of at least its version. */
#ifdef CHECK_P1
#define ASSERT_P1(pv, need) assert(pv >= need)
#else
#define ASSERT_P1(pv, need) skip
#endif

/* ---- the page's home state (HomeState: register, invalidate) ----------------------------- */
#define APPLY \
  if \
  :: reg -> slot++; reg = 0 \
  :: else -> skip \
  fi; \
  seq++

/* ---- the ledger (coherence/ledger.cc) ------------------------------------------------------ */
#define NEEDED(w, n) \
  ((!tracked[w] && !(nabove[w] & BIT(n))) || (tracked[w] && n > cov[w] && !(above[w] & BIT(n))))

#define ADVANCE(w) \
  do \
  :: above[w] & BIT(cov[w] + 1) -> above[w] = above[w] & ~BIT(cov[w] + 1); cov[w]++ \
  :: else -> break \
  od

#define LEDGER_APPLIED(w, n) \
  if \
  :: !tracked[w] -> nabove[w] = nabove[w] | BIT(n) \
  :: tracked[w] && n > cov[w] -> above[w] = above[w] | BIT(n); ADVANCE(w) \
  :: else -> skip \
  fi

#define COVER(w, r) \
  if \
  :: !tracked[w] -> above[w] = nabove[w]; nabove[w] = 0; cov[w] = 0; tracked[w] = 1 \
  :: else -> skip \
  fi; \
  if \
  :: r > cov[w] -> cov[w] = r \
  :: else -> skip \
  fi; \
  above[w] = above[w] & ~UPTO(cov[w]); \
  ADVANCE(w)

#define UNKNOWN(w) (known[w] && (!tracked[w] || (OLD_LEDGER && rd[w] < cov[w])))
#define BEHIND(w) (known[w] && tracked[w] && rd[w] > cov[w])

/* P2: a catch-up is justified by some origin read whose numbers up to the reading were not all
 * delivered (applied here or covered by an earlier catch-up of this incarnation), or that this
 * incarnation reads for the first time. */
#define JUSTIFIED(w) (known[w] && (!caught[w] || (UPTO(rd[w]) & ~got[w]) != 0))

/* ---- H receives invalidation n of writer w (HomeService::on_invalidate) ------------------ */
#if OLD_TOPO
#define HANDLE(w, n) \
  if \
  :: wnew[w] -> /* another digest: dropped, not acknowledged (COH0206) */ \
     printf("MSC: t%d H: drops W%d's #%d (another topology digest)\n", rt, w, n) \
  :: !wnew[w] && !known[w] -> APPLY /* unknown origin: applied, not acknowledged */ \
  :: !wnew[w] && known[w] -> \
     if \
     :: NEEDED(w, n) -> APPLY; LEDGER_APPLIED(w, n); got[w] = got[w] | BIT(n); \
        printf("MSC: t%d H: applies W%d's #%d and acks (slot %d, seq %d)\n", rt, w, n, slot, seq) \
     :: else -> skip \
     fi; \
     acked[w] = acked[w] | BIT(n) \
  fi
#else
/* Applied whatever its digest or origin, and acknowledged (the ack means "applied here"). */
#define HANDLE(w, n) \
  if \
  :: known[w] -> \
     if \
     :: NEEDED(w, n) -> APPLY; LEDGER_APPLIED(w, n); got[w] = got[w] | BIT(n); \
        printf("MSC: t%d H: applies W%d's #%d and acks (slot %d, seq %d)\n", rt, w, n, slot, seq) \
     :: else -> /* held already (a resent round, or covered by a catch-up) */ \
        printf("MSC: t%d H: holds W%d's #%d already: acks\n", rt, w, n) \
     fi; \
     acked[w] = acked[w] | BIT(n) \
  :: else -> APPLY; acked[w] = acked[w] | BIT(n); \
     printf("MSC: t%d H: applies W%d's #%d (origin not in its topology) and acks\n", rt, w, n) \
  fi
#endif

/* One of w's invalidations in flight reaches H, in any order, after any delay. A message lost
 * is one never delivered: in a bounded run that is a message delayed past the end, so loss needs
 * no step of its own (nor do the writer's resend rounds, which only turn a loss into a delay).
 * DUP: a copy may stay in flight and arrive again (a resend round that crossed the ack). */
#define DELIVER(w) \
  atomic { \
    hst == UP && inflight[w] != 0 -> \
    if \
    :: inflight[w] & BIT(1) -> dn = 1 \
    :: inflight[w] & BIT(2) -> dn = 2 \
    :: inflight[w] & BIT(3) -> dn = 3 \
    fi; \
    if \
    :: inflight[w] = inflight[w] & ~BIT(dn) \
    :: DUP -> skip \
    fi; \
    HANDLE(w, dn); \
    dn = 0 \
  }

#define RESET_RENEWAL rph = 0; treq = 0; rpc = 0; rd[0] = 0; rd[1] = 0

/* One read of writer w's region (counter, digest, skip word for H) by the renewal. */
#define READ_ORIGIN(w) \
  if \
  :: known[w] -> \
     rd[w] = ctr[w]; \
     if \
     :: NOT_CURRENT(w) -> rph = 0 /* a skip mark for H, or another digest: not current */ \
     :: else -> skip \
     fi \
  :: else -> skip /* not in H's topology: not read */ \
  fi

/* Renewed: vouch until t_req + lease (raise_lease_cap). */
#define SET_CAP \
  if \
  :: treq + LEASE > cap -> cap = treq + LEASE \
  :: else -> skip \
  fi; \
  cappc = rpc

proctype Home() {
end:
  do
  /* ---- the fence (HomeService::renew_once) ---- */
  /* Note t_req, read every origin's region (one step: see README.md, readings taken at once
   * are the earliest, the hardest case), then check the standing (a later step: invalidations
   * arrive in between, and the grace runs). A reading that fails (unreachable) leaves the cap
   * where it was: the same as no renewal, so it is not modelled apart. */
  :: atomic {
       hst == UP && rph == 0 ->
       treq = hc; rpc = pauses; rph = 1;
       READ_ORIGIN(0);
       READ_ORIGIN(1);
       printf("MSC: t%d H: renewal, t_req %d (its clock), reads W0 %d, W1 %d (W1 in its topology: %d)\n",
              rt, treq, rd[0], rd[1], known[1]);
       if
       :: rph == 0 -> RESET_RENEWAL; /* not current: renewal failed, the cap is not moved */
          printf("MSC: t%d H: renewal fails: a skip mark for H, or another digest\n", rt)
       :: else -> skip
       fi
     }
  :: atomic {
       hst == UP && rph == 1 &&
       (UNKNOWN(0) || UNKNOWN(1) || !(BEHIND(0) || BEHIND(1)) || hc >= treq + GRACE) ->
       unk = UNKNOWN(0) || UNKNOWN(1);
       beh = BEHIND(0) || BEHIND(1);
       if
       :: unk || beh -> /* catch-up: first reading / new incarnation, or numbers not arrived */
          printf("MSC: t%d H: CATCH-UP (unknown %d, behind %d; read W0 %d, W1 %d; covered W0 %d, W1 %d)\n",
                 rt, unk, beh, rd[0], rd[1], cov[0], cov[1]);
#ifdef CHECK_P2
          just = JUSTIFIED(0) || JUSTIFIED(1);
          assert(just);
#endif
#if PROBE
          if
          :: beh && !unk -> PROBE_AT(5) /* a catch-up on numbers not arrived within the grace */
          :: else -> skip
          fi;
#endif
          APPLY; /* an invalidate-all made after the readings (logged: older renders refused) */
          if
          :: known[0] -> COVER(0, rd[0]); got[0] = got[0] | UPTO(rd[0]); caught[0] = 1
          :: else -> skip
          fi;
          if
          :: known[1] -> COVER(1, rd[1]); got[1] = got[1] | UPTO(rd[1]); caught[1] = 1
          :: else -> skip
          fi
       :: else -> skip /* current */
       fi;
       SET_CAP;
       printf("MSC: t%d H: cap %d (its clock now %d; t_req after pause %d of %d)\n", rt, cap, hc,
              rpc, pauses);
       unk = 0; beh = 0; just = 0;
       RESET_RENEWAL
     }
  /* ---- invalidations: delivered (once or more), or lost ---- */
  :: DELIVER(0)
  :: DELIVER(1)
  /* ---- crash and restart ---- */
  :: atomic { CRASH && ncrash == 0 && hst == UP -> hst = DEAD; ncrash++; RESET_RENEWAL;
              printf("MSC: t%d H: CRASH (cap %d)\n", rt, cap) }
  :: atomic {
       hst == DEAD && (!LEASE_WAIT || hc >= cap) -> /* COH0205: the predecessor's lease ran out */
       oinc = hinc; oslot = slot; ocap = cap; opc = cappc;
       hinc++; slot = 0; seq = 0; reg = 0; cap = 0; cappc = pauses; /* fenced from birth */
       tracked[0] = 0; cov[0] = 0; above[0] = 0; nabove[0] = 0; got[0] = 0; caught[0] = 0;
       tracked[1] = 0; cov[1] = 0; above[1] = 0; nabove[1] = 0; got[1] = 0; caught[1] = 0;
       hst = UP;
       printf("MSC: t%d H: restarted, incarnation %d, fenced\n", rt, hinc)
     }
  /* ---- pause (VM stop: its clock stands still) and resume ---- */
  :: atomic { PAUSE && pauses == 0 && hst == UP -> hst = PAUSED;
              printf("MSC: t%d H: PAUSED (its clock stops at %d)\n", rt, hc) }
  :: atomic { hst == PAUSED -> hst = UP; pauses++;
              printf("MSC: t%d H: resumed (its clock %d, cap %d)\n", rt, hc, cap) }
  od
}

/* ---- a writer node: its updates, one after the other (ClusterClient::invalidate) ---------- */
#define RETURN_CONFIRMED(v) \
  if \
  :: v > retv -> retv = v \
  :: else -> skip \
  fi

proctype Writer(byte w; byte nw) {
  byte k, n, tn, v;
  bool excl, marked;
  do
  :: k < nw ->
     /* COMMIT, then numbered (fetch-add on the writer counter), then the skip word read and the
      * invalidation sent (in flight: its delivery is a step of its own). One step: a commit made
      * earlier than its number only gives renders a newer version sooner. */
     atomic {
       db++; v = db;
       ctr[w]++; n = ctr[w]; tn = rt;
       if
       :: EXCLUDED(w) -> excl = 1  /* marked since m, now >= m + bound: not sent, not awaited */
       :: else -> inflight[w] = inflight[w] | BIT(n)
       fi;
       printf("MSC: t%d W%d: COMMIT v%d, numbered #%d, sent to H unless excluded (%d)\n", rt, w,
              v, n, excl)
     }
     do
     :: atomic { excl -> RETURN_CONFIRMED(v);
#if PROBE
                 exclv = v;
#endif
                 printf("MSC: t%d W%d: update v%d RETURNS (H excluded)\n", rt, w, v); break }
     :: atomic { !excl && (acked[w] & BIT(n)) -> RETURN_CONFIRMED(v);
                 printf("MSC: t%d W%d: update v%d RETURNS (H acked)\n", rt, w, v); break }
     :: atomic {
          !excl && !(acked[w] & BIT(n)) && rt >= tn + BOUND ->
          if
          :: SAME(w) || !UNCONFIRMED -> RETURN_CONFIRMED(v); /* H is fenced by now */
             printf("MSC: t%d W%d: update v%d RETURNS at the bound (H not acked)\n", rt, w, v)
          :: else -> /* H of another digest did not ack: reported unconfirmed */
             printf("MSC: t%d W%d: update v%d returns UNCONFIRMED\n", rt, w, v);
             PROBE_AT(7)
          fi;
          break
        }
     :: atomic { MAY_MARK(w) && !excl && !marked && !(acked[w] & BIT(n)) &&
                 rt >= tn + BOUND / 2 -> marked = 1;
                 if
                 :: skipw[w] == 0 -> skipw[w] = PENDING /* CAS(0 -> PENDING) */
                 :: else -> skip                         /* marked already */
                 fi }
        atomic {
          if
          :: skipw[w] == PENDING -> skipw[w] = rt + 2;    /* then store(now) */
             printf("MSC: t%d W%d: skip mark for H set (since %d)\n", rt, w, rt)
          :: else -> skip
          fi
        }
     od;
     atomic { k++; n = 0; tn = 0; v = 0; excl = 0; marked = 0 }
  :: k == nw -> break
  od
}

/* The writer node's agent: probes a marked home; when it answers, CAS(mark -> 0). */
proctype Agent(byte w) {
end:
  do
  :: atomic { skipw[w] >= 2 && hst == UP -> skipw[w] = 0;
              printf("MSC: t%d W%d's agent: H answers, mark cleared\n", rt, w) }
  od
}

/* ---- the reader: a proxy's GET, NR of them one after the other ----------------------------- */
proctype Reader() {
  byte k, pv, ss, sinc;
  bool miss, ok;
  do
  :: k < NR ->
     /* The read begins, and decide_hit reads the slot at the home (tcp responder or shm): one
      * step. `need` at the check is at least `need` at the begin, so the assertion is at least
      * P1's (nothing between the begin and the check touches shared state). */
     atomic {
       need = retv;
       if
       :: cvalid && hst != PAUSED && ctinc == hinc && VOUCHING && ctslot == slot ->
          printf("MSC: t%d reader: HIT, page v%d (updates returned: up to v%d)\n", rt, cpv, need);
#if PROBE
          if
          :: need > 0 -> PROBE_AT(1) /* a hit that P1 constrains */
          :: else -> skip
          fi;
          if
          :: exclv > 0 && cpv >= exclv -> PROBE_AT(2) /* H re-admitted after an exclusion */
          :: else -> skip
          fi;
          if
          :: pauses > 0 -> PROBE_AT(3) /* a hit after H's pause */
          :: else -> skip
          fi;
          if
          :: hinc > 1 -> PROBE_AT(4) /* a hit on a restarted H */
          :: else -> skip
          fi;
#endif
          ASSERT_P1(cpv, need) /* Hit */
       :: cvalid && hst != PAUSED && ctinc == oinc && VOUCH(ocap, opc) && ctslot == oslot ->
          printf("MSC: t%d reader: HIT on the predecessor's table, page v%d (returned: v%d)\n",
                 rt, cpv, need);
          ASSERT_P1(cpv, need) /* Hit on the predecessor's table (an shm mapper) */
       :: cvalid && hst != PAUSED &&
          ((ctinc == hinc && VOUCHING && ctslot != slot) ||
           (ctinc == oinc && VOUCH(ocap, opc) && ctslot != oslot)) ->
          cvalid = 0; miss = 1 /* Stale: erased */
       :: else -> miss = 1 /* Miss, or Unverifiable (forwarded) */
       fi;
       need = 0
     }
     if
     :: miss ->
        /* seq_start (refused by a home that does not vouch), then the render reads the database:
         * one step (a render that reads later gets a newer version with the same seq_start). */
        atomic {
          if
          :: hst == UP && VOUCHING -> ss = seq; sinc = hinc; ok = 1
          :: else -> ok = 0
          fi;
          pv = db
        }
        /* coherence.register (refused: Fenced, OtherIncarnation, Race), and the proxy stores the
         * page with its tag (one step: only this reader reads the entry). */
        atomic {
          if
          :: ok && hst == UP && VOUCHING && hinc == sinc && seq == ss ->
             reg = 1; cvalid = 1; cpv = pv; ctinc = sinc; ctslot = slot;
             printf("MSC: t%d reader: rendered v%d, registered and stored (slot %d)\n", rt, pv, slot)
#if PROBE
          :: ok && hst == UP && VOUCHING && hinc == sinc && seq != ss -> PROBE_AT(6) /* Race */
#endif
          :: else -> skip
          fi;
          k++; pv = 0; ss = 0; sinc = 0; miss = 0; ok = 0
        }
     :: else -> k++
     fi
  :: k == NR -> break
  od
}

proctype Clock() {
  do
  :: atomic {
       rt < TMAX -> rt++;
       printf("MSC: ---- tick: t%d\n", rt);
       if
       :: hst != PAUSED -> hc++
       :: hst != PAUSED && drift < DRIFT -> drift++; /* H's clock a little slow */
          printf("MSC: t%d H's clock lags: %d\n", rt, hc)
       :: hst == PAUSED -> skip                    /* paused: its clock stands still */
       fi
     }
  :: rt == TMAX -> break
  od
}

init {
  atomic {
    known[0] = 1;
    known[1] = 1;
#if TOPO
    known[1] = 0; /* W1 was added: H's topology does not list it */
    wnew[1] = 1;
    if
    :: wnew[0] = 0
    :: wnew[0] = 1 /* W0 restarted with the new topology, H not yet */
    fi;
#endif
#if STEADY
    /* The run starts in a steady state: H renewed at t = 0 with every counter at 0 (a catch-up
     * covered them: its first reading) and vouches until LEASE; the page, version 0, is
     * registered and cached. STEADY=0: H starts as a new incarnation, fenced, nothing cached. */
    tracked[0] = known[0]; caught[0] = known[0];
    tracked[1] = known[1]; caught[1] = known[1];
    cap = LEASE;
    reg = 1;
    cvalid = 1; ctinc = hinc; ctslot = slot; cpv = db;
#endif
    run Clock();
    run Home();
    run Writer(0, W0N);
    run Writer(1, W1N);
    run Reader();
#if MARKS
    run Agent(0);
    run Agent(1);
#endif
  }
}
