/*
 * ncosed.pml -- Promela model of the N-CoSED distributed lock protocol, as specified in
 * docs/dlm.md, section "N-CoSED as built" (one lock), and, behind compile-time switches, of its
 * failures as dlm/engine.cc handles them (docs/dlm.md "Failures"). See README.md next to it.
 *
 * Compile-time parameters (spin -a -DNAME=VALUE; give the same flags to spin -t to replay a trail):
 *   N      number of lockd nodes (default 3); node HOME = 0 is the lock's home
 *   R      lock/unlock requests issued by each node, one at a time (default 2)
 *   MIX    0: every request picks shared/exclusive nondeterministically (default)
 *          1: fixed mix, node n's request i is exclusive iff (n + i) is even
 *
 * Protocol variants (no failures):
 *   (none)           docs/dlm.md, plus one rule this model showed to be missing there: E's node
 *                    does not hand E off while E's release batch (WRITE K ; CAS released) is
 *                    in flight; it checks the hand-off again when that CAS completes. The lockd
 *                    is an event loop that keeps handling messages while its remote operations
 *                    are in flight.
 *   -DEARLY_HANDOFF  docs/dlm.md to the letter: the hand-off rule does not look at the release
 *                    batch. Broken: a late WRITE K of E overwrites the token of a later holder
 *                    (fencing violation; see README.md for the trail). Expected to fail.
 *   -DTHESIS_RESET   (broken on purpose) the group owner resets the shared count of W to zero
 *                    once the releases it received equal the count it reads (READ W, then
 *                    WRITE the count: two remote operations), as the thesis suggests. Checks
 *                    mutual exclusion only (the thesis has no tokens). Expected to fail.
 *   -DK_AFTER_CAS    (broken on purpose) the release batch sets the released bit before it
 *                    writes K (the ordering "K valid before released is visible" is lost).
 *                    Expected to fail.
 *   -DNO_TOKEN_CHECK check mutual exclusion and progress only, not the fencing tokens.
 *   -DCAS_RETRY      model the exclusive CAS loop with a stale expected value (bigger); by
 *                    default only the CAS that succeeds is modelled (a failed CAS is a read).
 *
 * Failures (README.md, "Failures"):
 *   -DCLIENT_DEATH   a client process may die (owner_gone): holding -> its hold is released;
 *                    waiting -> its request becomes a ghost, released at once when granted;
 *                    Starting -> dropped. DEATHS (default 1) bounds the deaths in a run.
 *   -DLOCKD_RESTART  one member's lockd (not the home) may crash and restart as a new
 *                    incarnation, at any point: its records, its client's request and hold,
 *                    the messages on their way to it and its unexecuted remote operations are
 *                    lost; the home then runs the recovery of recover_all()/on_recover(): FENCE,
 *                    generation bump, dlm.recover to every member in rank order (the home last
 *                    unless HOMEFIRST=1), recovery ticket R with token max(K, last recovery,
 *                    reported) + JUMP, held until the reported holders sent RecoveredRel.
 *                    Messages carry the generation. SPURIOUS (default 0) more recoveries the
 *                    home may start at any time (a member whose answers were late, a lockd back
 *                    from a freeze, an old incarnation's message noted as a restart). CRASHER
 *                    (default 0: any member) restricts the crash to one node. JUMP (default 40)
 *                    stands for 2^32. S: tickets per node (default R*(1+SPURIOUS+1)).
 *     The default is the protocol with the fixes of README.md; these switches give back
 *     dlm/engine.cc's behaviour, each one found to be a bug (README.md, "Bugs found"):
 *   -DENGINE_SKIP_IDLE    recover_all skips a lock that is released, count 0, with its tail on a
 *                         member that is not dead -- also when that member restarted, so that
 *                         the tail's record is gone.
 *   -DENGINE_REUSE_IDS    a new incarnation's tickets and request ids start again at 1.
 *   -DENGINE_STALE_GEN    acquire() reads the lock's generation from the cache (or dlm.resolve)
 *                         before the critical section that creates the request; on_recover()
 *                         updates only cached generations.
 *   -DENGINE_RREL_ANY_GEN a RecoveredRel counts against any record with holders outstanding,
 *                         whatever its generation.
 *   -DENGINE_AS_IS        all four: dlm/engine.cc as it is.
 *     Variants that must fail (sanity checks of the new assertions) or that show a condition:
 *   -DENGINE_OLD_TOP      the recovery token from K and the holds only (before 0b754bf).
 *   -DRECOVERY_NO_WAIT    the recovery ticket is released at once, without waiting for the
 *                         reported holders.
 *   -DDEATH_RELEASE_WAITING a dead client's waiting exclusive entry is released at once (marked
 *                         released and published) instead of becoming a ghost.
 *   -DJUMP=1              a recovery jump smaller than the grants since K was written.
 *   -DLATE_OPS            a crashed incarnation's posted release batch may still execute at the
 *                         home at any later time, also after the recovery.
 *   -DLOST_ANSWER         (issue 33) one member's enqueue CAS executes at the home but its answer
 *                         is lost (a deadline missed: a loaded machine, a slow home). As
 *                         dlm/engine.cc does now: the member drops the ticket's record, asks the
 *                         home to recover (SRSL_PURGE -> recovery_needed) and the request steps
 *                         back (Starting) -- a slow home is not a dead home. Must pass: every
 *                         request granted, no violation.
 *   -DENGINE_HOMEDOWN     with LOST_ANSWER: the engine's first logic: the request fails with
 *                         HomeDown and nothing else happens. Spin finds the wedge (the orphan
 *                         ticket is the tail: nobody behind it is ever granted).
 *   -DPROBE=k             reachability probe: the branch marked PROBE_AT(k) asserts false.
 */

#ifndef N
#define N 3
#endif
#ifndef R
#define R 2
#endif
#ifndef MIX
#define MIX 0
#endif

#if defined(CLIENT_DEATH) || defined(LOCKD_RESTART)
#define FAILURES
#endif
#ifdef ENGINE_AS_IS
#define ENGINE_SKIP_IDLE
#define ENGINE_REUSE_IDS
#define ENGINE_STALE_GEN
#define ENGINE_RREL_ANY_GEN
#endif
#if defined(LOCKD_RESTART) && (defined(CAS_RETRY) || defined(THESIS_RESET) || defined(K_AFTER_CAS) || defined(EARLY_HANDOFF))
#error "LOCKD_RESTART is not combined with CAS_RETRY, THESIS_RESET, K_AFTER_CAS or EARLY_HANDOFF"
#endif
#ifndef DEATHS
#define DEATHS 1
#endif

#define HOME    0
#define R0      0                       /* the home's virtual ticket */
#define K0      1                       /* token of R0 (epoch << 48 in the real system) */
#ifdef LOCKD_RESTART
#define CAP     6                       /* capacity of each node-to-node channel */
#else
#define CAP     4                       /* capacity of each node-to-node channel */
#endif
#define GRANTED 255                     /* SUCCESSOR(T, E, 0, granted) */

#ifdef LOCKD_RESTART
#ifndef SPURIOUS
#define SPURIOUS 0
#endif
#ifdef LOST_ANSWER
#define MAXREC  (2 + SPURIOUS)          /* recoveries: the crash's, the lost answer's, spurious */
#else
#define MAXREC  (1 + SPURIOUS)          /* recoveries: the crash's and the spurious ones */
#endif
#ifndef S
#define S       (R * (1 + MAXREC))      /* tickets per node: one per start of a request */
#endif
#ifndef JUMP
#define JUMP    40                      /* the recovery's token jump (2^32) */
#endif
#ifndef CRASHER
#define CRASHER 0                       /* 0: any member but the home may crash */
#endif
#ifndef HOMEFIRST
#define HOMEFIRST 0
#endif
#define FENCE   250                     /* the FENCE ticket */
#define NT      (N*S + 1 + MAXREC)      /* R0, S per node, one per recovery */
#define TK(n,s)   ((n)*S + (s) + 1)     /* node n's s-th ticket (rank:seq) */
#define RT(j)     (N*S + 1 + (j))       /* the home's ticket of recovery j */
#define OWNER(t)  ((((t) == R0) || ((t) > N*S)) -> HOME : (((t) - 1) / S))
#define MAXC    (N*R*(1+MAXREC) + 1)
/* dlm.recover is called on the members in rank order; phase p (1..N) asks ASK(p) */
#if HOMEFIRST
#define ASK(p)  ((p) - 1)
#else
#define ASK(p)  (((p) == N) -> HOME : (p))
#endif
#else
#define NT      (N*R+1)                 /* tickets: R0 and one per possible exclusive request */
#define TK(n,i)   ((n)*R + (i) + 1)     /* ticket of node n's request i (rank:seq) */
#define OWNER(t)  (((t) == R0) -> HOME : (((t) - 1) / R))
#define MAXC    (N*R+1)                 /* the shared count never reaches this in the model */
#endif

/* client states of a node */
#define IDLE   0
#define XCAS   1    /* exclusive: CAS posted (retried with the returned value) */
#define XREADK 2    /* exclusive: CAS done, READ K of the batch not yet executed */
#define XWAIT  3    /* exclusive: waiting for EXCL_GRANT */
#define XHOLD  4    /* exclusive: held */
#define SREADK 5    /* shared: FAA done, READ K of the batch not yet executed */
#define SWAIT  6    /* shared: waiting for SHARED_GRANT */
#define SHOLD  7    /* shared: held */
#define XSTART 8    /* exclusive: Starting (fenced, or re-requested after a recovery) */
#define SSTART 9    /* shared: Starting */
#define XACQ   10   /* ENGINE_STALE_GEN: generation read, request not created yet (exclusive) */
#define SACQ   11   /* ENGINE_STALE_GEN: the same, shared */

mtype = { SHARED_REQ, SHARED_GRANT, SHARED_REL, SUCCESSOR, EXCL_GRANT };
#ifdef LOCKD_RESTART
mtype = { RREL };   /* RecoveredRel: a holder reported to a recovery released (to the home) */
#endif

/* ---- the home word W = [ released:1 | tail ticket | shared count ], and K ---------------- */
bit  Wrel  = 1;
byte Wtail = R0;
byte Wcnt  = 0;
byte K     = K0;

/* ---- per exclusive ticket: its record, kept at its own node (OWNER(t)) ------------------- */
bit  ralive[NT];    /* the record exists */
bit  rrel[NT];      /* released by its client */
byte rtok[NT];      /* its token (kept after the record goes, for the assertions) */
#ifdef LOCKD_RESTART
byte rwait[NT*N*2]; /* waiting SHARED_REQ of G(t) from node s, two slots: k+1, 0 = none */
byte rwid[NT*N*2];  /* ... and their request ids */
byte rgen[NT];      /* the record's generation */
#else
byte rwait[NT*N];   /* waiting SHARED_REQ of G(t) from node s: k+1, 0 = none */
#endif
byte rnrel[NT];     /* SHARED_REL of G(t) received */
bit  rsk[NT];       /* successor known */
byte rsucc[NT];     /* successor E' */
byte rsc[NT];       /* successor's count c = |G(t)| */

/* ---- per ticket: its release batch (WRITE K ; CAS [0|t|c] -> [1|t|c]) in flight ----------
 * This is NIC state, not record state: it survives the record being dropped. */
byte bst[NT];       /* 0 none, 1 WRITE K pending, 2 CAS pending, 3 CAS retry pending
                     * (K_AFTER_CAS: 1 CAS pending, 2 WRITE K pending) */
byte bK[NT];        /* the token the WRITE K will store */
byte bexp[NT];      /* the count the CAS expects */

#ifdef THESIS_RESET
byte rsst[NT];      /* count reset: 0 none, 1 READ W pending, 2 WRITE count pending */
byte rsv[NT];       /* the count read */
#endif

/* node-to-node messages: net[src*N+dst], FIFO per pair of nodes (tcp / RC queue pair) */
#ifdef LOCKD_RESTART
chan net[N*N] = [CAP] of { mtype, byte, byte, byte, byte };   /* ..., generation */
#else
chan net[N*N] = [CAP] of { mtype, byte, byte, byte };
#endif

#ifdef LOCKD_RESTART
/* ---- the home's slot state and its recovery (recover_all) ---------------------------------- */
byte hgen;          /* the lock's generation at the home */
byte lastR = K0;    /* last_recovery_token */
byte early;         /* early_recovered_rels */
byte rph;           /* recovery phase: 0 none, 1..N dlm.recover to ASK(rph), N+1 the new tail */
bit  need_rec;      /* recovery_needed (set when the home notices the restart) */
byte nspur;         /* spurious recoveries started */
byte nrec;          /* recoveries that fenced (recovery j uses ticket RT(j)) */
byte rnh;           /* holds reported to the running recovery */
byte rtop;          /* highest token reported */
byte rhout[MAXREC]; /* recovery ticket j: reported holders still holding */
byte ncrash;        /* lockd crashes so far (at most one) */
#ifdef LOST_ANSWER
byte nlost;         /* enqueue CASes whose answer was lost (at most one) */
#endif
byte xnode;         /* the node that restarted */
#ifdef LATE_OPS
byte obt;           /* the dead incarnation's release batch: ticket, state, K, count */
byte obst;
byte obK;
byte obexp;
#endif
#endif

/* -DPROBE=k: site k asserts false, so that spin shows it is reachable (README.md) */
#ifdef PROBE
#define PROBE_AT(k) assert(PROBE != k)
#else
#define PROBE_AT(k) skip
#endif

/* ---- ghost state for the assertions --------------------------------------------------- */
byte nex;             /* exclusive holders (live clients) */
byte nsh;             /* shared holders (live clients) */
byte maxtok = K0;     /* highest token granted so far (R0 was granted K0) */
byte maxX   = K0;     /* highest exclusive token granted so far */
byte ndone;           /* nodes whose R requests were all granted and released */
#ifdef CLIENT_DEATH
byte ndeath;          /* client deaths so far */
#endif

ltl live { <> (ndone == N) }

/* ------------------------------------------------------------------------------------------ */

/* send(dst, type, a, b, c, generation): the generation travels only with LOCKD_RESTART */
#ifdef LOCKD_RESTART
inline send(dst, mt, a1, a2, a3, gg) {
  assert(len(net[me*N + dst]) < CAP);
  net[me*N + dst]!mt, a1, a2, a3, gg
}
#else
inline send(dst, mt, a1, a2, a3, gg) {
  assert(len(net[me*N + dst]) < CAP);
  net[me*N + dst]!mt, a1, a2, a3
}
#endif

/* An exclusive grant: nobody else holds the lock, and its token exceeds every token granted
 * before it. */
#ifdef THESIS_RESET
#define NO_TOKEN_CHECK      /* the thesis has no tokens: check mutual exclusion only */
#endif
#ifdef NO_TOKEN_CHECK
#define TOKEN_ASSERT(e) skip
#else
#define TOKEN_ASSERT(e) assert(e)
#endif
inline grantX(tok) {
  assert(nex == 0 && nsh == 0);
  TOKEN_ASSERT(tok > maxtok);
  nex = 1; maxtok = tok; maxX = tok
}

/* A shared grant of G(t): no exclusive holder, its token exceeds the token of t (the exclusive
 * it follows) and of every exclusive granted before. */
inline grantS(tok, t) {
  assert(nex == 0);
  TOKEN_ASSERT(tok > rtok[t]);
  TOKEN_ASSERT(tok > maxX);
  nsh++;
  if :: tok > maxtok -> maxtok = tok :: else -> skip fi
}

inline drop(t) {
  ralive[t] = 0; rrel[t] = 0; rnrel[t] = 0; rsk[t] = 0; rsucc[t] = 0; rsc[t] = 0
}

/* Hand-off rule (at t's node): t released, successor (E', c) known, c SHARED_REL of G(t)
 * arrived: EXCL_GRANT(E', token(t) + c + 1) and drop t's record. */
#ifndef EARLY_HANDOFF
#define BATCH_DONE(t) && bst[t] == 0
#else
#define BATCH_DONE(t)
#endif
#ifdef LOCKD_RESTART
#define RGEN(t) rgen[t]
#else
#define RGEN(t) 0
#endif
inline handoff(t) {
  if
  :: rrel[t] && rsk[t] && rnrel[t] == rsc[t] BATCH_DONE(t) ->
       printf("n%d: hand-off T%d -> EXCL_GRANT(E%d, token %d) to n%d, drop T%d\n", me, t, rsucc[t], rtok[t] + rsc[t] + 1, OWNER(rsucc[t]), t);
       send(OWNER(rsucc[t]), EXCL_GRANT, rsucc[t], rtok[t] + rsc[t] + 1, 0, RGEN(t));
       drop(t)
  :: else -> skip
  fi
}

/* release_record(): t released; every waiting SHARED_REQ of G(t) granted with token(t)+1+k
 * (before anything else); then the hand-off if the successor is known, else the release batch
 * WRITE K ; CAS [0|t|c] -> [1|t|c] is posted. Uses the node's j. */
#ifdef LOCKD_RESTART
inline grant_waiter(t, w) {
  if
  :: rwait[w] != 0 ->
       printf("n%d: SHARED_GRANT(token %d, request %d) to n%d\n", me, rtok[t] + rwait[w], rwid[w], j);
       if :: t > N*S -> PROBE_AT(11) :: else -> skip fi;          /* G(R) of a recovery ticket */
       send(j, SHARED_GRANT, rtok[t] + rwait[w], t, rwid[w], rgen[t]);
       rwait[w] = 0; rwid[w] = 0
  :: else -> skip
  fi
}
#endif
inline release_rec(t) {
  rrel[t] = 1;
  j = 0;
  do                                      /* grant the whole waiting G(t) */
  :: j < N ->
#ifdef LOCKD_RESTART
       grant_waiter(t, (t*N + j)*2);
       grant_waiter(t, (t*N + j)*2 + 1);
#else
       if
       :: rwait[t*N + j] != 0 ->
            printf("n%d: SHARED_GRANT(token %d) to n%d\n", me, rtok[t] + rwait[t*N + j], j);
            send(j, SHARED_GRANT, rtok[t] + rwait[t*N + j], t, 0, 0);
            rwait[t*N + j] = 0
       :: else -> skip
       fi;
#endif
       j++
  :: else -> break
  od;
  j = 0;
  if
  :: rsk[t] -> handoff(t)
  :: else ->                                                /* post WRITE K ; CAS */
       printf("n%d: posts WRITE K=%d ; CAS [0|E%d|0]->[1|E%d|0]\n", me, rtok[t], t, t);
       bK[t] = rtok[t]; bexp[t] = 0; bst[t] = 1
  fi
}

/* The client's unlock of an exclusive hold (also owner_gone on a hold, and a ghost's release). */
inline xunlock() {
  nex--;
  printf("n%d: unlock E%d (token %d)\n", me, E, rtok[E]);
#ifdef LOCKD_RESTART
  if
  :: rcv ->                               /* a hold adopted by a recovery */
       printf("n%d: RecoveredRel(gen %d) to the home\n", me, qgen);
       send(HOME, RREL, 0, 0, 0, qgen); rcv = 0
  :: !rcv && ralive[E] -> release_rec(E)
  :: !rcv && !ralive[E] ->                /* its record is gone (only with reused tickets) */
#ifndef ENGINE_REUSE_IDS
       assert(0);
#endif
       printf("n%d: E%d has no record any more: nothing is released\n", me, E)
  fi;
  htok = 0;
#else
  release_rec(E);
#endif
  E = 0
}

/* The client's unlock of a shared hold: SHARED_REL(T), one-way (RecoveredRel if recovered). */
inline sunlock() {
  nsh--;
#ifdef LOCKD_RESTART
  if
  :: rcv ->
       printf("n%d: shared unlock: RecoveredRel(gen %d) to the home\n", me, qgen);
       send(HOME, RREL, 0, 0, 0, qgen); rcv = 0
  :: else ->
       printf("n%d: shared unlock: SHARED_REL(T%d) to n%d\n", me, T, OWNER(T));
       send(OWNER(T), SHARED_REL, T, 0, 0, qgen)
  fi;
  htok = 0;
#else
  printf("n%d: shared unlock: SHARED_REL(T%d) to n%d\n", me, T, OWNER(T));
  send(OWNER(T), SHARED_REL, T, 0, 0, 0);
#endif
  T = 0
}

/* One message from node src to this node: a local event of this node's lockd. */
#ifdef LOCKD_RESTART
#define RECV_MSG(src) net[src*N + me]?mt, a, b, c, g
/* a message for a record: it exists and has the message's generation (else dropped as stale) */
#define REC_OK(t) (ralive[t] && rgen[t] == g)
#define STALE :: else -> printf("n%d: drops a stale %e (gen %d)\n", me, mt, g)
#else
#define RECV_MSG(src) net[src*N + me]?mt, a, b, c
#define REC_OK(t) true
#define STALE
#endif
/* protocol invariants: asserted unless tickets are reused (then the code's behaviour runs) */
#ifdef ENGINE_REUSE_IDS
#define INVARIANT(e) skip
#else
#define INVARIANT(e) assert(e)
#endif

inline handle(src) {
  RECV_MSG(src);
  if
  :: mt == SHARED_REQ ->                       /* (T=a, k=b, S=c | request id=c, gen) */
#ifdef LOCKD_RESTART
       if
       :: REC_OK(a) ->
            assert(OWNER(a) == me);
            if
            :: rrel[a] ->
                 printf("n%d: recv SHARED_REQ(T%d,k=%d,request %d): T%d released -> SHARED_GRANT(token %d)\n", me, a, b, c, a, rtok[a] + 1 + b);
                 send(src, SHARED_GRANT, rtok[a] + 1 + b, a, c, g)
            :: else ->
                 printf("n%d: recv SHARED_REQ(T%d,k=%d,request %d) from n%d: waits at T%d\n", me, a, b, c, src, a);
                 if
                 :: rwait[(a*N + src)*2] == 0 -> rwait[(a*N + src)*2] = b + 1; rwid[(a*N + src)*2] = c
                 :: else -> assert(rwait[(a*N + src)*2 + 1] == 0);
                            rwait[(a*N + src)*2 + 1] = b + 1; rwid[(a*N + src)*2 + 1] = c
                 fi
            fi
       STALE
       fi
#else
       assert(ralive[a] && OWNER(a) == me);
       if
       :: rrel[a] ->
            printf("n%d: recv SHARED_REQ(T%d,k=%d,n%d): T%d released -> SHARED_GRANT(token %d)\n", me, a, b, c, a, rtok[a] + 1 + b);
            send(c, SHARED_GRANT, rtok[a] + 1 + b, a, 0, 0)
       :: else ->
            printf("n%d: recv SHARED_REQ(T%d,k=%d,n%d): waits at T%d\n", me, a, b, c, a);
            assert(rwait[a*N + c] == 0); rwait[a*N + c] = b + 1
       fi
#endif
  :: mt == SHARED_GRANT ->                     /* (token=a, T=b | request id=c, gen) */
#ifdef LOCKD_RESTART
       if
       :: st == SWAIT && c == rid && g == qgen ->
            INVARIANT(b == T);
#else
       assert(st == SWAIT && b == T);
#endif
       printf("n%d: recv SHARED_GRANT(token %d): shared in G(T%d) granted\n", me, a, T);
       grantS(a, T);
#ifdef LOCKD_RESTART
       htok = a;
#endif
#ifdef CLIENT_DEATH
       if
       :: ghost -> printf("n%d: the request is a ghost: released at once\n", me);
                   PROBE_AT(2); sunlock(); ghost = 0; st = IDLE
       :: else -> st = SHOLD
       fi
#else
       st = SHOLD
#endif
#ifdef LOCKD_RESTART
       STALE
       fi
#endif
  :: mt == SHARED_REL ->                       /* (T=a, gen) */
#ifdef LOCKD_RESTART
       if
       :: REC_OK(a) ->
#else
       assert(ralive[a] && OWNER(a) == me);
#endif
       rnrel[a]++;
       printf("n%d: recv SHARED_REL(T%d): %d release(s) of G(T%d)\n", me, a, rnrel[a], a);
#ifdef THESIS_RESET
       if
       :: rrel[a] && !rsk[a] && rsst[a] == 0 -> rsst[a] = 1
       :: else -> skip
       fi;
#endif
       handoff(a)
#ifdef LOCKD_RESTART
       STALE
       fi
#endif
  :: mt == SUCCESSOR ->                        /* (T=a, E=b, c, gen) */
#ifdef LOCKD_RESTART
       if
       :: REC_OK(a) ->
            INVARIANT(OWNER(a) == me && !rsk[a]);
#else
       assert(ralive[a] && OWNER(a) == me && !rsk[a]);
#endif
       if
       :: c == GRANTED ->
            printf("n%d: recv SUCCESSOR(T%d,E%d,0,granted): drop T%d\n", me, a, b, a);
            INVARIANT(rrel[a] && rnrel[a] == 0); drop(a)
       :: else ->
            printf("n%d: recv SUCCESSOR(T%d,E%d,c=%d)\n", me, a, b, c);
            rsk[a] = 1; rsucc[a] = b; rsc[a] = c;
            INVARIANT(rnrel[a] <= c);
            handoff(a)
       fi
#ifdef LOCKD_RESTART
       STALE
       fi
#endif
  :: mt == EXCL_GRANT ->                       /* (E=a, token=b, gen) */
#ifdef LOCKD_RESTART
       if
       :: REC_OK(a) && st == XWAIT && a == E ->
#elif defined(DEATH_RELEASE_WAITING)
       if
       :: !(st == XWAIT && a == E) ->       /* the code: its request is gone, pass it on */
            printf("n%d: recv EXCL_GRANT(E%d, token %d) for E%d without request: passed on\n", me, a, b, a);
            rtok[a] = b; release_rec(a)
       :: else -> skip
       fi;
       if
       :: st == XWAIT && a == E ->
#else
       assert(st == XWAIT && a == E);
#endif
       printf("n%d: recv EXCL_GRANT(E%d, token %d): exclusive granted\n", me, a, b);
       rtok[E] = b;
       grantX(b);
#ifdef LOCKD_RESTART
       htok = b;
       if :: ncrash > 0 && me == xnode -> PROBE_AT(13) :: else -> skip fi;   /* restarted node */
#endif
#ifdef CLIENT_DEATH
       if
       :: ghost -> printf("n%d: the request is a ghost: released at once\n", me);
                   PROBE_AT(1); xunlock(); ghost = 0; st = IDLE
       :: else -> st = XHOLD
       fi
#else
       st = XHOLD
#endif
#if defined(DEATH_RELEASE_WAITING) && !defined(LOCKD_RESTART)
       :: else -> skip
       fi
#endif
#ifdef LOCKD_RESTART
       :: REC_OK(a) && !(st == XWAIT && a == E) ->
            /* a record whose request is not waiting for it: only with reused tickets */
            INVARIANT(0);
            rtok[a] = b;
            if
            :: st == XHOLD && a == E ->
                 printf("n%d: recv EXCL_GRANT(E%d, token %d) for a held E%d: its token changes\n", me, a, b, a)
            :: else ->
                 printf("n%d: recv EXCL_GRANT(E%d, token %d) for E%d without request: passed on\n", me, a, b, a);
                 release_rec(a)
            fi
       STALE
       fi
#endif
#ifdef LOCKD_RESTART
  :: mt == RREL ->                             /* RecoveredRel(gen) to the home */
       assert(me == HOME);
       if
       :: g == hgen ->
            /* the record with reported holders outstanding */
            tt = 0; jj = 0;
            do
            :: jj < MAXREC ->
                 if
#ifdef ENGINE_RREL_ANY_GEN
                 :: ralive[RT(jj)] && rhout[jj] > 0 -> tt = RT(jj); break
#else
                 :: ralive[RT(jj)] && rhout[jj] > 0 && rgen[RT(jj)] == g -> tt = RT(jj); break
#endif
                 :: else -> jj++
                 fi
            :: else -> break
            od;
            if
            :: tt != 0 ->
                 rhout[jj]--;
                 printf("n%d: recv RecoveredRel(gen %d): T%d waits for %d more\n", me, g, tt, rhout[jj]);
                 if
                 :: rhout[jj] == 0 -> PROBE_AT(3); release_rec(tt)
                 :: else -> skip
                 fi
            :: else ->
                 printf("n%d: recv RecoveredRel(gen %d) before its recovery record\n", me, g);
                 if :: rph != 0 -> PROBE_AT(4); early++ :: else -> skip fi   /* read only by that recovery */
            fi;
            tt = 0; jj = 0
       STALE
       fi
#endif
  fi;
  mt = 0; a = 0; b = 0; c = 0
#ifdef LOCKD_RESTART
  ; g = 0
#endif
}

/* One remote operation of t's release batch executes at the home (CAS: with its completion). */
inline batch(t) {
#ifndef K_AFTER_CAS
  if
  :: bst[t] == 1 ->                                                /* WRITE K = token(t) */
       printf("home: WRITE K=%d of E%d's release batch executes (K was %d)\n", bK[t], t, K);
       K = bK[t]; bst[t] = 2
  :: bst[t] >= 2 ->                                                /* CAS [0|t|c] -> [1|t|c] */
       if
       :: Wrel == 0 && Wtail == t && Wcnt == bexp[t] ->
            printf("home: release CAS of E%d succeeds: W=[1|E%d|%d]\n", t, t, Wcnt);
            Wrel = 1; bst[t] = 0; bK[t] = 0; bexp[t] = 0
       :: else ->
            printf("home: release CAS of E%d fails, W=[%d|E%d|%d]\n", t, Wrel, Wtail, Wcnt);
            if
            :: Wrel == 0 && Wtail == t -> bexp[t] = Wcnt; bst[t] = 3 /* only the count changed: retry */
            :: else -> bst[t] = 0; bK[t] = 0; bexp[t] = 0         /* tail changed: SUCCESSOR comes */
#ifndef EARLY_HANDOFF
                 ; if :: ralive[t] -> handoff(t) :: else -> skip fi
#endif
            fi
       fi
  fi
#else
  if
  :: bst[t] == 1 ->                                                /* CAS first: the bug */
       if
       :: Wrel == 0 && Wtail == t && Wcnt == bexp[t] ->
            printf("home: release CAS of E%d succeeds before its WRITE K: W=[1|E%d|%d], K=%d\n", t, t, Wcnt, K);
            Wrel = 1; bst[t] = 2
       :: else ->
            if
            :: Wrel == 0 && Wtail == t -> bexp[t] = Wcnt
            :: else -> bst[t] = 2
            fi
       fi
  :: bst[t] == 2 ->
       printf("home: WRITE K=%d of E%d's release batch executes\n", bK[t], t);
       K = bK[t]; bst[t] = 0; bK[t] = 0; bexp[t] = 0
#ifndef EARLY_HANDOFF
       ; if :: ralive[t] -> handoff(t) :: else -> skip fi
#endif
  fi
#endif
}

#ifdef THESIS_RESET
inline reset(t) {
  if
  :: rsst[t] == 1 ->                                               /* READ W */
       if
       :: Wrel == 1 && Wtail == t && Wcnt > 0 && Wcnt == rnrel[t] ->
            printf("n%d: READ W=[1|T%d|%d] == releases received: will reset the count\n", me, t, Wcnt);
            rsv[t] = Wcnt; rsst[t] = 2
       :: else -> rsst[t] = 0
       fi
  :: rsst[t] == 2 ->                                               /* WRITE shared count = 0 */
       printf("n%d: WRITE count=0 (it was %d)\n", me, Wcnt);
       Wcnt = 0; rnrel[t] = rnrel[t] - rsv[t]; rsv[t] = 0; rsst[t] = 0
  fi
}
#define RESET_STEPS \
  :: atomic { rsst[TK(me,0)] != 0 -> reset(TK(me,0)) } \
  :: atomic { R > 1 && rsst[TK(me,R-1)] != 0 -> reset(TK(me,R-1)) } \
  :: atomic { me == HOME && rsst[R0] != 0 -> reset(R0) }
#else
#define RESET_STEPS
#endif

#if N < 2 || N > 4
#error "N must be 2, 3 or 4"
#endif
#if R > 2
#error "R must be 1 or 2"
#endif

#ifndef LOCKD_RESTART
/* ---- no lockd failures: the lockd handles messages and completions while its remote
 * operations are in flight (an event loop) ---- */
#define MUTEX_FREE true
#if N == 2
#define RECV :: atomic { handle(0) } :: atomic { handle(1) }
#elif N == 3
#define RECV :: atomic { handle(0) } :: atomic { handle(1) } :: atomic { handle(2) }
#elif N == 4
#define RECV :: atomic { handle(0) } :: atomic { handle(1) } :: atomic { handle(2) } \
             :: atomic { handle(3) }
#endif

/* Remote operations of one node execute at the home in the order posted (one RC queue pair /
 * one connection per pair of nodes). A retried release CAS is posted when the failed one
 * completes: the client's next atomic may have been posted before it (bst == 3). */
#if R == 1
#define BATCHES_IDLE (bst[TK(me,0)] == 0)
#define BATCHES_AHEAD (bst[TK(me,0)] != 0 && bst[TK(me,0)] != 3)
#else
#define BATCHES_IDLE (bst[TK(me,0)] == 0 && bst[TK(me,1)] == 0)
#define BATCHES_AHEAD ((bst[TK(me,0)] != 0 && bst[TK(me,0)] != 3) || \
                       (bst[TK(me,1)] != 0 && bst[TK(me,1)] != 3))
#endif
#if R > 1
#define BSTEPS :: atomic { bst[TK(me,0)] != 0 -> batch(TK(me,0)) } \
               :: atomic { bst[TK(me,1)] != 0 -> batch(TK(me,1)) }
#else
#define BSTEPS :: atomic { bst[TK(me,0)] != 0 -> batch(TK(me,0)) }
#endif
#define FAIL_STEPS
#else
/* ---- LOCKD_RESTART: the engine's mutex. Every step of a lockd takes it, except the remote
 * operations themselves. It is held from a request's creation through its CAS/FAA and READ K
 * (XCAS, XREADK, SREADK), and while a release batch runs (publish_release: from its WRITE K,
 * bst 2 and 3, until the CAS returns). bst == 1 is the publication not yet started
 * (publish_pending: finish() takes the mutex again for it): other steps may come first. */
#if S > 8 || MAXREC > 3
#error "S <= 8 and MAXREC <= 3"
#endif
#define BQ(t)    (bst[t] >= 2)
#define BZ(t)    (bst[t] != 0)
#define BSTEP(t) :: atomic { bst[t] != 0 -> batch(t) }
/* every ticket of this node (S of them; the home also has the recovery tickets) */
#define BUSY_0(F) F(TK(me,0))
#define BSTEPS_0 BSTEP(TK(me,0))
#if S > 1
#define BUSY_1(F) || F(TK(me,1))
#define BSTEPS_1 BSTEP(TK(me,1))
#else
#define BUSY_1(F)
#define BSTEPS_1
#endif
#if S > 2
#define BUSY_2(F) || F(TK(me,2))
#define BSTEPS_2 BSTEP(TK(me,2))
#else
#define BUSY_2(F)
#define BSTEPS_2
#endif
#if S > 3
#define BUSY_3(F) || F(TK(me,3))
#define BSTEPS_3 BSTEP(TK(me,3))
#else
#define BUSY_3(F)
#define BSTEPS_3
#endif
#if S > 4
#define BUSY_4(F) || F(TK(me,4))
#define BSTEPS_4 BSTEP(TK(me,4))
#else
#define BUSY_4(F)
#define BSTEPS_4
#endif
#if S > 5
#define BUSY_5(F) || F(TK(me,5))
#define BSTEPS_5 BSTEP(TK(me,5))
#else
#define BUSY_5(F)
#define BSTEPS_5
#endif
#if S > 6
#define BUSY_6(F) || F(TK(me,6))
#define BSTEPS_6 BSTEP(TK(me,6))
#else
#define BUSY_6(F)
#define BSTEPS_6
#endif
#if S > 7
#define BUSY_7(F) || F(TK(me,7))
#define BSTEPS_7 BSTEP(TK(me,7))
#else
#define BUSY_7(F)
#define BSTEPS_7
#endif
#if MAXREC == 1
#define BUSY_H(F) || (me == HOME && F(RT(0)))
#define BSTEPS_H :: atomic { me == HOME && bst[RT(0)] != 0 -> batch(RT(0)) }
#elif MAXREC == 2
#define BUSY_H(F) || (me == HOME && (F(RT(0)) || F(RT(1))))
#define BSTEPS_H :: atomic { me == HOME && bst[RT(0)] != 0 -> batch(RT(0)) } \
                 :: atomic { me == HOME && bst[RT(1)] != 0 -> batch(RT(1)) }
#else
#define BUSY_H(F) || (me == HOME && (F(RT(0)) || F(RT(1)) || F(RT(2))))
#define BSTEPS_H :: atomic { me == HOME && bst[RT(0)] != 0 -> batch(RT(0)) } \
                 :: atomic { me == HOME && bst[RT(1)] != 0 -> batch(RT(1)) } \
                 :: atomic { me == HOME && bst[RT(2)] != 0 -> batch(RT(2)) }
#endif
#define ANYB(F) (BUSY_0(F) BUSY_1(F) BUSY_2(F) BUSY_3(F) BUSY_4(F) BUSY_5(F) BUSY_6(F) \
                 BUSY_7(F) BUSY_H(F))
#define BSTEPS BSTEPS_0 BSTEPS_1 BSTEPS_2 BSTEPS_3 BSTEPS_4 BSTEPS_5 BSTEPS_6 BSTEPS_7 BSTEPS_H
#define BATCHES_IDLE (!ANYB(BZ))
#define MUTEX_FREE (st != XCAS && st != XREADK && st != SREADK && !ANYB(BQ))
#if N == 2
#define RECV :: atomic { MUTEX_FREE && nempty(net[0*N+me]) -> handle(0) } \
             :: atomic { MUTEX_FREE && nempty(net[1*N+me]) -> handle(1) }
#elif N == 3
#define RECV :: atomic { MUTEX_FREE && nempty(net[0*N+me]) -> handle(0) } \
             :: atomic { MUTEX_FREE && nempty(net[1*N+me]) -> handle(1) } \
             :: atomic { MUTEX_FREE && nempty(net[2*N+me]) -> handle(2) }
#elif N == 4
#define RECV :: atomic { MUTEX_FREE && nempty(net[0*N+me]) -> handle(0) } \
             :: atomic { MUTEX_FREE && nempty(net[1*N+me]) -> handle(1) } \
             :: atomic { MUTEX_FREE && nempty(net[2*N+me]) -> handle(2) } \
             :: atomic { MUTEX_FREE && nempty(net[3*N+me]) -> handle(3) }
#endif

/* Erase this node's records of the lock (on_recover; a crash): records, waiters, and a
 * publication not yet started (its record is gone: finish() skips it). */
inline erase_records() {
  s = 0;
  do
  :: s < NT ->
       if
       :: OWNER(s) == me ->
            drop(s); rgen[s] = 0;
            j = 0;
            do
            :: j < 2*N -> rwait[s*N*2 + j] = 0; rwid[s*N*2 + j] = 0; j++
            :: else -> break
            od;
            if
            :: bst[s] == 1 -> bst[s] = 0; bK[s] = 0; bexp[s] = 0
            :: else -> assert(bst[s] == 0)
            fi
       :: else -> skip
       fi;
       s++
  :: else -> break
  od;
  s = 0; j = 0
}

/* on_recover() at this node, for the running recovery (generation hgen): holders report and
 * are adopted (RecoveredRel later), waiters go back to Starting, ghosts are dropped, this
 * node's records of the lock are erased, the cached generation is updated. */
inline on_recover() {
  if
  :: st == XHOLD || st == SHOLD ->
       if
       :: rcv && qgen == hgen -> skip
       :: else ->
            printf("n%d: dlm.recover(gen %d): reports its hold (state %d), token %d\n", me, hgen, st, htok);
            rnh++;
            if :: htok > rtop -> rtop = htok :: else -> skip fi;
            rcv = 1; qgen = hgen
       fi
  :: (st == XWAIT || st == SWAIT) && !ghost ->
       printf("n%d: dlm.recover(gen %d): its waiting request steps back (Starting)\n", me, hgen);
       PROBE_AT(5);
       if :: st == XWAIT -> st = XSTART :: else -> st = SSTART fi;
       qgen = hgen; E = 0; T = 0
  :: (st == XWAIT || st == SWAIT) && ghost ->
       printf("n%d: dlm.recover(gen %d): its ghost is dropped\n", me, hgen); PROBE_AT(8);
       ghost = 0; E = 0; T = 0; st = IDLE
  :: st == XSTART || st == SSTART -> qgen = hgen
  :: else -> printf("n%d: dlm.recover(gen %d): nothing\n", me, hgen)
  fi;
  erase_records();
#ifdef ENGINE_STALE_GEN
  if :: cached -> cgen = hgen :: else -> skip fi
#else
  cached = 1; cgen = hgen
#endif
}

/* recover_all(), step 1: the quiescence test, then FENCE and the generation bump. */
#ifdef ENGINE_SKIP_IDLE
#define TAIL_SAFE true                      /* alive(rank_of(tail)): a restarted member is alive */
#else
#define TAIL_SAFE !(ncrash > 0 && OWNER(Wtail) == xnode)   /* its records may be gone */
#endif
inline rec_start() {
  if
  :: need_rec -> need_rec = 0
  :: else -> nspur++
  fi;
  if
  :: Wrel && Wcnt == 0 && TAIL_SAFE ->
       printf("home: recovery: W=[1|E%d|0] is idle: skipped\n", Wtail)
  :: else ->
       assert(nrec < MAXREC);
       if :: Wrel && Wcnt == 0 -> PROBE_AT(9) :: else -> skip fi;   /* not idle: the restarted tail */
       printf("home: recovery %d: FENCE (W was [%d|E%d|%d]), generation %d\n", nrec, Wrel, Wtail, Wcnt, hgen + 1);
       Wrel = 0; Wtail = FENCE; Wcnt = 0;
       hgen++; early = 0; nrec++; rph = 1
  fi
}

/* recover_all(), step 3 (at the home, under its mutex): the recovery ticket becomes the tail. */
inline rec_finish() {
  jj = nrec - 1; tt = RT(jj);
#ifdef ENGINE_OLD_TOP
  tk = K;
#else
  tk = (K > lastR -> K : lastR);
#endif
  if :: rtop > tk -> tk = rtop :: else -> skip fi;
  ralive[tt] = 1; rgen[tt] = hgen; rtok[tt] = tk + JUMP;
  assert(rtok[tt] < FENCE);                /* the model's token space */
  lastR = rtok[tt];
  TOKEN_ASSERT(rtok[tt] > maxtok);         /* above every token granted, dead holders' too */
  maxtok = rtok[tt]; maxX = rtok[tt];
  rhout[jj] = (rnh > early -> rnh - early : 0);
#ifdef RECOVERY_NO_WAIT
  rhout[jj] = 0;
#endif
  printf("home: recovery %d: T%d is the tail, token %d, %d holder(s) reported, %d outstanding\n", jj, tt, rtok[tt], rnh, rhout[jj]);
  if
  :: rhout[jj] == 0 -> rrel[tt] = 1; K = rtok[tt]; Wrel = 1
  :: else -> Wrel = 0
  fi;
  Wtail = tt; Wcnt = 0;
  rph = 0; rnh = 0; rtop = 0; early = 0; tk = 0; tt = 0; jj = 0
}

/* A lockd crash (and restart as a new incarnation) at this member. */
inline crash() {
  printf("n%d: LOCKD CRASH: restarts as a new incarnation\n", me);
  ncrash++; need_rec = 1; xnode = me;
  if
  :: st == XHOLD -> nex--; PROBE_AT(10)   /* its client's connection closes: the hold is lost */
  :: st == SHOLD -> nsh--; PROBE_AT(10)
  :: st == XCAS ->              /* the CAS in flight: it may still execute, or not */
       if
       :: Wtail != FENCE -> printf("home: the dead incarnation's CAS executes: W=[0|E%d|0]\n", E);
                            Wrel = 0; Wtail = E; Wcnt = 0
       :: true -> skip
       fi
  :: else -> skip
  fi;
  if :: st != IDLE -> i++ :: else -> skip fi;   /* the request is abandoned */
  st = IDLE; E = 0; T = 0; ghost = 0; rcv = 0; htok = 0; orel = 0; otail = 0; ocnt = 0;
  qgen = 0; qg = 0; rid = 0;       /* a dead client stays dead; a live one goes on */
  /* its release batch in flight: executes now, or never (LATE_OPS: any time later) */
  s = 0;
  do
  :: s < NT ->
       if
       :: OWNER(s) == me && bst[s] != 0 ->
#ifdef LATE_OPS
            assert(obst == 0);
            obt = s; obst = bst[s]; obK = bK[s]; obexp = bexp[s]
#else
            if
            :: printf("n%d: its release batch of E%d dies with it\n", me, s)
            :: printf("n%d: its release batch of E%d executes as it dies\n", me, s); PROBE_AT(14);
               if :: bst[s] == 1 -> K = bK[s] :: else -> skip fi;
               if :: Wrel == 0 && Wtail == s && Wcnt == bexp[s] -> Wrel = 1 :: else -> skip fi
            fi
#endif
            ; bst[s] = 0; bK[s] = 0; bexp[s] = 0
       :: else -> skip
       fi;
       s++
  :: else -> break
  od;
  erase_records();
  /* the messages on their way to the old incarnation are lost */
  j = 0;
  do
  :: j < N ->
       do
       :: nempty(net[j*N + me]) -> net[j*N + me]?mt, a, b, c, g
       :: empty(net[j*N + me]) -> break
       od;
       j++
  :: else -> break
  od;
  j = 0; mt = 0; a = 0; b = 0; c = 0; g = 0;
  cached = 0; cgen = 0;
#ifdef ENGINE_REUSE_IDS
  nsq = 0; ibase = i;           /* next_seq_ = 1, next_id_ = 1 */
#endif
  skip
}

#ifdef LATE_OPS
inline orphan_op() {
  if
  :: obst == 1 ->
       printf("home: the dead incarnation's WRITE K=%d (E%d) executes (K was %d)\n", obK, obt, K);
       K = obK; obst = 2
  :: obst >= 2 ->
       printf("home: the dead incarnation's release CAS of E%d executes\n", obt);
       if :: Wrel == 0 && Wtail == obt && Wcnt == obexp -> Wrel = 1 :: else -> skip fi;
       obst = 0; obt = 0; obK = 0; obexp = 0
  fi
}
#define ORPHAN_STEP :: atomic { obst != 0 && me == xnode -> orphan_op() }
#else
#define ORPHAN_STEP
#endif

#define CRASH_STEP :: atomic { ncrash == 0 && me != HOME && (CRASHER == 0 || me == CRASHER) -> crash() }
#define REC_STEPS \
  :: atomic { me == HOME && rph == 0 && (need_rec || nspur < SPURIOUS) -> rec_start() } \
  :: atomic { rph >= 1 && rph <= N && ASK(rph) == me && MUTEX_FREE -> \
              on_recover(); rph++ } \
  :: atomic { me == HOME && rph == N + 1 && MUTEX_FREE -> rec_finish() }
#define FAIL_STEPS BSTEPS CRASH_STEP REC_STEPS ORPHAN_STEP
#endif

/* the start of a request, in the critical section that creates it */
#ifdef LOCKD_RESTART
inline start_x() {
  assert(nsq < S);                        /* S tickets per node */
  E = TK(me, nsq); nsq++;
  ralive[E] = 1; rgen[E] = qgen;
  st = XCAS
}
#endif
inline start_s() {
  /* shared: FAA(W, 1) */
  orel = Wrel; otail = Wtail; ocnt = Wcnt;
  printf("n%d: shared request %d: FAA returns W=[%d|E%d|%d]\n", me, i, Wrel, Wtail, Wcnt);
  Wcnt++;
  assert(Wcnt < MAXC);
#ifdef CAS_RETRY
  erel = orel; etail = otail; ecnt = Wcnt;
#endif
#ifdef LOCKD_RESTART
  if
  :: otail == FENCE -> printf("n%d: FENCE: the request backs off (Starting)\n", me); PROBE_AT(7);
                       orel = 0; otail = 0; ocnt = 0; st = SSTART
  :: else -> st = SREADK
  fi
#else
  st = SREADK
#endif
}

proctype node(byte me)
{
  byte i;                                 /* requests issued */
  byte st = IDLE;
  byte E, T, tk, j;
  bit  orel;  byte otail, ocnt;           /* W as returned by this node's CAS / FAA */
#ifdef CAS_RETRY
  bit  erel = 1; byte etail = R0, ecnt;   /* last seen W: the expected value of the next CAS */
#endif
  mtype mt; byte a, b, c;
#ifdef FAILURES
  bit  cdead;                             /* the client died (owner_gone) */
  bit  ghost;                             /* its request is a ghost: released when granted */
#endif
#ifdef LOCKD_RESTART
  byte g;                                 /* a message's generation */
  byte qgen;                              /* the request's generation */
  byte qg;                                /* the generation read by acquire() */
  byte rid;                               /* the request's id */
  byte ibase;                             /* request ids start again here (ENGINE_REUSE_IDS) */
  byte nsq;                               /* next ticket sequence number */
  byte htok;                              /* the hold's token */
  bit  rcv;                               /* the hold was adopted by a recovery */
  bit  cached = 1;                        /* the lock's resolution is cached ... */
  byte cgen;                              /* ... with this generation */
  byte s, tt, jj;
#endif

  do
  /* ---- the client: a new request (mode choice, record creation and the atomic posted) ---- */
#ifndef LOCKD_RESTART
#ifdef CLIENT_DEATH
  :: st == IDLE && i < R && !cdead && !BATCHES_AHEAD ->
#else
  :: st == IDLE && i < R && !BATCHES_AHEAD ->  /* behind this node's release batch, if any */
#endif
     atomic {
       if
       :: MIX == 0 || (me + i) % 2 == 0 ->
            /* exclusive: create E's record (waiting), then CAS(W, expected, [0|E|0]) */
            E = TK(me, i);
            ralive[E] = 1;
            st = XCAS
       :: MIX == 0 || (me + i) % 2 == 1 ->
            start_s()
       fi
     }
#else
  :: atomic { st == IDLE && i < R && !cdead && MUTEX_FREE && BATCHES_IDLE ->
       rid = i - ibase;
       /* the generation: from the cache, else dlm.resolve (the home's) */
       if
       :: cached -> qg = cgen
       :: else -> qg = hgen; cached = 1; cgen = qg
       fi;
#ifdef ENGINE_STALE_GEN
       /* acquire() reads it before the critical section that creates the request */
       printf("n%d: request %d: acquire() reads generation %d (cache or dlm.resolve)\n", me, i, qg);
       if
       :: MIX == 0 || (me + i) % 2 == 0 -> st = XACQ
       :: MIX == 0 || (me + i) % 2 == 1 -> st = SACQ
       fi
#else
       qgen = qg; qg = 0;
       if
       :: MIX == 0 || (me + i) % 2 == 0 -> start_x()
       :: MIX == 0 || (me + i) % 2 == 1 -> start_s()
       fi
#endif
     }
#ifdef ENGINE_STALE_GEN
  :: atomic { st == XACQ && MUTEX_FREE -> qgen = qg; qg = 0; start_x() }
  :: atomic { st == SACQ && MUTEX_FREE -> qgen = qg; qg = 0; start_s() }
#endif
  /* Starting: retried (timer, Resume) once the word is not fenced */
  :: atomic { st == XSTART && MUTEX_FREE && Wtail != FENCE -> start_x() }
  :: atomic { st == SSTART && MUTEX_FREE && Wtail != FENCE -> start_s() }
#endif
  /* exclusive: CAS at the home (a failure returns W: retry with it) */
  :: st == XCAS ->
     atomic {
#ifdef CAS_RETRY
       if
       :: Wrel == erel && Wtail == etail && Wcnt == ecnt ->
            orel = Wrel; otail = Wtail; ocnt = Wcnt;
            Wrel = 0; Wtail = E; Wcnt = 0;
            erel = 0; etail = E; ecnt = 0;
            st = XREADK
       :: else ->
            erel = Wrel; etail = Wtail; ecnt = Wcnt
       fi
#else
#ifdef LOCKD_RESTART
       if
       :: Wtail == FENCE ->                  /* never CAS over a FENCE: back off */
            printf("n%d: exclusive E%d: W is FENCE: backs off (Starting)\n", me, E);
            PROBE_AT(6); drop(E); rgen[E] = 0; E = 0; st = XSTART
#ifdef LOST_ANSWER
       :: Wtail != FENCE && nlost == 0 && me != HOME ->
            /* the CAS executes at the home; its answer is lost (the operation's deadline) */
            printf("n%d: exclusive E%d: CAS W=[%d|E%d|%d] -> [0|E%d|0] executes, ANSWER LOST\n", me, E, Wrel, Wtail, Wcnt, E);
            Wrel = 0; Wtail = E; Wcnt = 0; nlost++;
            drop(E); rgen[E] = 0; E = 0;      /* start()'s catch: erase_record */
#ifdef ENGINE_HOMEDOWN
            printf("n%d: the request fails with HomeDown\n", me);
            i++; st = IDLE
#else
            printf("n%d: asks the home to recover; the request steps back (Starting)\n", me);
            need_rec = 1; st = XSTART
#endif
#endif
       :: Wtail != FENCE ->
#endif
       /* the CAS that succeeds (a failed one only reads W, see README) */
       printf("n%d: exclusive E%d: CAS W=[%d|E%d|%d] -> [0|E%d|0]\n", me, E, Wrel, Wtail, Wcnt, E);
       orel = Wrel; otail = Wtail; ocnt = Wcnt;
       Wrel = 0; Wtail = E; Wcnt = 0;
       st = XREADK
#ifdef LOCKD_RESTART
       fi
#endif
#endif
     }
  /* exclusive: the batched READ K executes at the home; the batch completes at the node */
  :: st == XREADK ->
     atomic {
       tk = K;
       if
       :: orel && ocnt == 0 ->
            printf("n%d: READ K=%d: E%d granted now, token %d; SUCCESSOR(T%d,E%d,0,granted) to n%d\n", me, tk, E, tk + 1, otail, E, OWNER(otail));
            rtok[E] = tk + 1;
            grantX(tk + 1);
#ifdef LOCKD_RESTART
            htok = tk + 1;
            send(OWNER(otail), SUCCESSOR, otail, E, GRANTED, qgen);
#else
            send(OWNER(otail), SUCCESSOR, otail, E, GRANTED, 0);
#endif
            st = XHOLD
       :: else ->
            printf("n%d: E%d waits: SUCCESSOR(T%d,E%d,c=%d) to n%d\n", me, E, otail, E, ocnt, OWNER(otail));
#ifdef LOCKD_RESTART
            send(OWNER(otail), SUCCESSOR, otail, E, ocnt, qgen);
#else
            send(OWNER(otail), SUCCESSOR, otail, E, ocnt, 0);
#endif
            st = XWAIT
       fi;
       tk = 0; orel = 0; otail = 0; ocnt = 0
     }
  /* exclusive unlock at E's node */
#ifdef LOCKD_RESTART
  :: atomic { st == XHOLD && MUTEX_FREE -> xunlock(); st = IDLE; i++ }
#else
  :: st == XHOLD ->
     atomic {
       xunlock();
       st = IDLE; i++
     }
#endif
  /* shared: the batched READ K executes at the home; the batch completes at the node */
  :: st == SREADK ->
     atomic {
       tk = K;
       T = otail;
       if
       :: orel ->
            printf("n%d: READ K=%d: shared granted now in G(T%d), k=%d, token %d\n", me, tk, T, ocnt, tk + 1 + ocnt);
            grantS(tk + 1 + ocnt, T); st = SHOLD
#ifdef LOCKD_RESTART
            ; htok = tk + 1 + ocnt
#endif
       :: else ->
            printf("n%d: READ K (unused): SHARED_REQ(T%d,k=%d) to n%d\n", me, T, ocnt, OWNER(otail));
#ifdef LOCKD_RESTART
            send(OWNER(otail), SHARED_REQ, otail, ocnt, rid, qgen); st = SWAIT
#else
            send(OWNER(otail), SHARED_REQ, otail, ocnt, me, 0); st = SWAIT
#endif
       fi;
       tk = 0; orel = 0; otail = 0; ocnt = 0
     }
  /* shared unlock: SHARED_REL(T), one-way */
#ifdef LOCKD_RESTART
  :: atomic { st == SHOLD && MUTEX_FREE -> sunlock(); st = IDLE; i++ }
#else
  :: st == SHOLD ->
     atomic {
       sunlock();
       st = IDLE; i++
     }
#endif
#ifdef CLIENT_DEATH
  /* ---- the client process dies: its connection closes, lockd runs owner_gone() ---- */
  :: atomic { !cdead && ndeath < DEATHS && MUTEX_FREE &&
              ((st == IDLE && i < R) || st == XWAIT || st == SWAIT || st == XHOLD || st == SHOLD ||
               st == XSTART || st == SSTART) ->
       ndeath++; cdead = 1;
       printf("n%d: CLIENT DIES (state %d)\n", me, st);
       if
       :: st == XHOLD -> xunlock(); st = IDLE          /* its holds are released */
       :: st == SHOLD -> sunlock(); st = IDLE
#ifdef DEATH_RELEASE_WAITING
       :: st == XWAIT -> printf("n%d: (broken) its waiting E%d is released at once\n", me, E);
                         release_rec(E); E = 0; st = IDLE
       :: st == SWAIT -> ghost = 1
#else
       :: st == XWAIT || st == SWAIT -> ghost = 1      /* withdrawn: a ghost in the queue */
#endif
       :: st == XSTART || st == SSTART -> st = IDLE    /* not in the queue: dropped */
       :: st == IDLE -> skip
       fi }
#endif
  /* ---- this node's release batches executing at the home ---- */
#ifndef LOCKD_RESTART
  BSTEPS
#endif
  /* ---- messages ---- */
  RECV
  RESET_STEPS
  FAIL_STEPS
  /* ---- all requests granted and released, no remote operation of ours in flight ---- */
#ifdef FAILURES
  :: atomic { st == IDLE && (i == R || cdead) && BATCHES_IDLE -> ndone++; break }
#else
  :: atomic { st == IDLE && i == R && BATCHES_IDLE -> ndone++; break }
#endif
  od;

  /* the lockd keeps serving the records it still owns */
end_serve:
  do
  RECV
  RESET_STEPS
  FAIL_STEPS
  od
}

init {
  byte n = 0;
  atomic {
    ralive[R0] = 1; rrel[R0] = 1; rtok[R0] = K0;   /* R0: granted and released, token K0 */
    do
    :: n < N -> run node(n); n++
    :: else -> break
    od
  }
}
