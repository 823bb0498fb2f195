/*
 * ncosed.pml -- Promela model of the N-CoSED distributed lock protocol, as specified in
 * docs/dlm.md, section "N-CoSED as built" (one lock, no failures). See README.md next to it.
 *
 * Compile-time parameters (spin -a -DNAME=VALUE; give the same flags to spin -t to replay a trail):
 *   N      number of lockd nodes (default 3); node HOME = 0 is the lock's home
 *   R      lock/unlock requests issued by each node, one at a time (default 2)
 *   MIX    0: every request picks shared/exclusive nondeterministically (default)
 *          1: fixed mix, node n's request i is exclusive iff (n + i) is even
 *
 * Protocol variants:
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

#define HOME    0
#define R0      0                       /* the home's virtual ticket */
#define NT      (N*R+1)                 /* tickets: R0 and one per possible exclusive request */
#define K0      1                       /* token of R0 (epoch << 48 in the real system) */
#define CAP     4                       /* capacity of each node-to-node channel */
#define GRANTED 255                     /* SUCCESSOR(T, E, 0, granted) */
#define MAXC    (N*R+1)                 /* the shared count never reaches this in the model */

#define TK(n,i)   ((n)*R + (i) + 1)     /* ticket of node n's request i (rank:seq) */
#define OWNER(t)  (((t) == R0) -> HOME : (((t) - 1) / R))

/* client states of a node */
#define IDLE   0
#define XCAS   1    /* exclusive: CAS posted (retried with the returned value) */
#define XREADK 2    /* exclusive: CAS done, READ K of the batch not yet executed */
#define XWAIT  3    /* exclusive: waiting for EXCL_GRANT */
#define XHOLD  4    /* exclusive: held */
#define SREADK 5    /* shared: FAA done, READ K of the batch not yet executed */
#define SWAIT  6    /* shared: waiting for SHARED_GRANT */
#define SHOLD  7    /* shared: held */

mtype = { SHARED_REQ, SHARED_GRANT, SHARED_REL, SUCCESSOR, EXCL_GRANT };

/* ---- the home word W = [ released:1 | tail ticket | shared count ], and K ---------------- */
bit  Wrel  = 1;
byte Wtail = R0;
byte Wcnt  = 0;
byte K     = K0;

/* ---- per exclusive ticket: its record, kept at its own node (OWNER(t)) ------------------- */
bit  ralive[NT];    /* the record exists */
bit  rrel[NT];      /* released by its client */
byte rtok[NT];      /* its token (kept after the record goes, for the assertions) */
byte rwait[NT*N];   /* waiting SHARED_REQ of G(t) from node s: k+1, 0 = none */
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
chan net[N*N] = [CAP] of { mtype, byte, byte, byte };

/* ---- ghost state for the assertions --------------------------------------------------- */
byte nex;             /* exclusive holders */
byte nsh;             /* shared holders */
byte maxtok = K0;     /* highest token granted so far (R0 was granted K0) */
byte maxX   = K0;     /* highest exclusive token granted so far */
byte ndone;           /* nodes whose R requests were all granted and released */

ltl live { <> (ndone == N) }

/* ------------------------------------------------------------------------------------------ */

inline send(dst, mt, a1, a2, a3) {
  assert(len(net[me*N + dst]) < CAP);
  net[me*N + dst]!mt, a1, a2, a3
}

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
inline handoff(t) {
  if
  :: rrel[t] && rsk[t] && rnrel[t] == rsc[t] BATCH_DONE(t) ->
       printf("n%d: hand-off T%d -> EXCL_GRANT(E%d, token %d) to n%d, drop T%d\n", me, t, rsucc[t], rtok[t] + rsc[t] + 1, OWNER(rsucc[t]), t);
       send(OWNER(rsucc[t]), EXCL_GRANT, rsucc[t], rtok[t] + rsc[t] + 1, 0);
       drop(t)
  :: else -> skip
  fi
}

/* One message from node src to this node: a local event of this node's lockd. */
inline handle(src) {
  net[src*N + me]?mt, a, b, c;
  if
  :: mt == SHARED_REQ ->                       /* (T=a, k=b, S=c) */
       assert(ralive[a] && OWNER(a) == me);
       if
       :: rrel[a] ->
            printf("n%d: recv SHARED_REQ(T%d,k=%d,n%d): T%d released -> SHARED_GRANT(token %d)\n", me, a, b, c, a, rtok[a] + 1 + b);
            send(c, SHARED_GRANT, rtok[a] + 1 + b, a, 0)
       :: else ->
            printf("n%d: recv SHARED_REQ(T%d,k=%d,n%d): waits at T%d\n", me, a, b, c, a);
            assert(rwait[a*N + c] == 0); rwait[a*N + c] = b + 1
       fi
  :: mt == SHARED_GRANT ->                     /* (token=a, T=b) */
       assert(st == SWAIT && b == T);
       printf("n%d: recv SHARED_GRANT(token %d): shared in G(T%d) granted\n", me, a, T);
       grantS(a, T);
       st = SHOLD
  :: mt == SHARED_REL ->                       /* (T=a) */
       assert(ralive[a] && OWNER(a) == me);
       rnrel[a]++;
       printf("n%d: recv SHARED_REL(T%d): %d release(s) of G(T%d)\n", me, a, rnrel[a], a);
#ifdef THESIS_RESET
       if
       :: rrel[a] && !rsk[a] && rsst[a] == 0 -> rsst[a] = 1
       :: else -> skip
       fi;
#endif
       handoff(a)
  :: mt == SUCCESSOR ->                        /* (T=a, E=b, c) */
       assert(ralive[a] && OWNER(a) == me && !rsk[a]);
       if
       :: c == GRANTED ->
            printf("n%d: recv SUCCESSOR(T%d,E%d,0,granted): drop T%d\n", me, a, b, a);
            assert(rrel[a] && rnrel[a] == 0); drop(a)
       :: else ->
            printf("n%d: recv SUCCESSOR(T%d,E%d,c=%d)\n", me, a, b, c);
            rsk[a] = 1; rsucc[a] = b; rsc[a] = c;
            assert(rnrel[a] <= c);
            handoff(a)
       fi
  :: mt == EXCL_GRANT ->                       /* (E=a, token=b) */
       assert(st == XWAIT && a == E);
       printf("n%d: recv EXCL_GRANT(E%d, token %d): exclusive granted\n", me, a, b);
       rtok[E] = b;
       grantX(b);
       st = XHOLD
  fi;
  mt = 0; a = 0; b = 0; c = 0
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

#if N == 2
#define RECV :: atomic { handle(0) } :: atomic { handle(1) }
#elif N == 3
#define RECV :: atomic { handle(0) } :: atomic { handle(1) } :: atomic { handle(2) }
#elif N == 4
#define RECV :: atomic { handle(0) } :: atomic { handle(1) } :: atomic { handle(2) } \
             :: atomic { handle(3) }
#else
#error "N must be 2, 3 or 4"
#endif
#if R > 2
#error "R must be 1 or 2"
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

  do
  /* ---- the client: a new request (mode choice, record creation and the atomic posted) ---- */
  :: st == IDLE && i < R && !BATCHES_AHEAD ->  /* behind this node's release batch, if any */
     atomic {
       if
       :: MIX == 0 || (me + i) % 2 == 0 ->
            /* exclusive: create E's record (waiting), then CAS(W, expected, [0|E|0]) */
            E = TK(me, i);
            ralive[E] = 1;
            st = XCAS
       :: MIX == 0 || (me + i) % 2 == 1 ->
            /* shared: FAA(W, 1) */
            orel = Wrel; otail = Wtail; ocnt = Wcnt;
            printf("n%d: shared request %d: FAA returns W=[%d|E%d|%d]\n", me, i, Wrel, Wtail, Wcnt);
            Wcnt++;
            assert(Wcnt < MAXC);
#ifdef CAS_RETRY
            erel = orel; etail = otail; ecnt = Wcnt;
#endif
            st = SREADK
       fi
     }
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
       /* the CAS that succeeds (a failed one only reads W, see README) */
       printf("n%d: exclusive E%d: CAS W=[%d|E%d|%d] -> [0|E%d|0]\n", me, E, Wrel, Wtail, Wcnt, E);
       orel = Wrel; otail = Wtail; ocnt = Wcnt;
       Wrel = 0; Wtail = E; Wcnt = 0;
       st = XREADK
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
            send(OWNER(otail), SUCCESSOR, otail, E, GRANTED);
            st = XHOLD
       :: else ->
            printf("n%d: E%d waits: SUCCESSOR(T%d,E%d,c=%d) to n%d\n", me, E, otail, E, ocnt, OWNER(otail));
            send(OWNER(otail), SUCCESSOR, otail, E, ocnt);
            st = XWAIT
       fi;
       tk = 0; orel = 0; otail = 0; ocnt = 0
     }
  /* exclusive unlock at E's node */
  :: st == XHOLD ->
     atomic {
       nex--;
       printf("n%d: unlock E%d (token %d)\n", me, E, rtok[E]);
       rrel[E] = 1;
       j = 0;
       do                                      /* grant the whole waiting G(E) */
       :: j < N ->
            if
            :: rwait[E*N + j] != 0 ->
                 printf("n%d: SHARED_GRANT(token %d) to n%d\n", me, rtok[E] + rwait[E*N + j], j);
                 send(j, SHARED_GRANT, rtok[E] + rwait[E*N + j], E, 0);
                 rwait[E*N + j] = 0
            :: else -> skip
            fi;
            j++
       :: else -> break
       od;
       j = 0;
       if
       :: rsk[E] -> handoff(E)
       :: else ->                                                /* post WRITE K ; CAS */
            printf("n%d: posts WRITE K=%d ; CAS [0|E%d|0]->[1|E%d|0]\n", me, rtok[E], E, E);
            bK[E] = rtok[E]; bexp[E] = 0; bst[E] = 1
       fi;
       E = 0; st = IDLE; i++
     }
  /* shared: the batched READ K executes at the home; the batch completes at the node */
  :: st == SREADK ->
     atomic {
       tk = K;
       T = otail;
       if
       :: orel ->
            printf("n%d: READ K=%d: shared granted now in G(T%d), k=%d, token %d\n", me, tk, T, ocnt, tk + 1 + ocnt);
            grantS(tk + 1 + ocnt, T); st = SHOLD
       :: else ->
            printf("n%d: READ K (unused): SHARED_REQ(T%d,k=%d) to n%d\n", me, T, ocnt, OWNER(otail));
            send(OWNER(otail), SHARED_REQ, otail, ocnt, me); st = SWAIT
       fi;
       tk = 0; orel = 0; otail = 0; ocnt = 0
     }
  /* shared unlock: SHARED_REL(T), one-way */
  :: st == SHOLD ->
     atomic {
       nsh--;
       printf("n%d: shared unlock: SHARED_REL(T%d) to n%d\n", me, T, OWNER(T));
       send(OWNER(T), SHARED_REL, T, 0, 0);
       T = 0; st = IDLE; i++
     }
  /* ---- this node's release batches executing at the home ---- */
  :: atomic { bst[TK(me,0)] != 0 -> batch(TK(me,0)) }
#if R > 1
  :: atomic { bst[TK(me,1)] != 0 -> batch(TK(me,1)) }
#endif
  /* ---- messages ---- */
  RECV
  RESET_STEPS
  /* ---- all requests granted and released, no remote operation of ours in flight ---- */
  :: atomic { st == IDLE && i == R && BATCHES_IDLE -> ndone++; break }
  od;

  /* the lockd keeps serving the records it still owns */
end_serve:
  do
  RECV
  RESET_STEPS
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
