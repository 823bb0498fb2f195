/* dlm/model/stream.pml — the message stream between two lockds (agents/lockd/lockd.cc:
 * Lockd::send, flush_locked, note_ack, the dlm.msg handler, the heartbeat answer's trailer).
 *
 * ncosed.pml models the protocol over reliable FIFO channels between two incarnations. This
 * model checks that lockd's stream layer provides exactly that over what the fabric gives it:
 * connections whose writes fail, messages written into a connection that then breaks (gone, or
 * still delivered after the sender moved to a new connection), several connections' handlers
 * at the receiver, acknowledgements that travel late in heartbeat answers or not at all.
 * Issue 33, deliver 3; dlm/model/README.md "The message stream".
 *
 * The sender's engine sends K messages, numbered 1..K in the stream (out_seq). The outbox holds
 * (acked, out_seq]; next is the first not written on the current connection yet. A write may
 * fail (the connection is dropped, reconnected at the next flush) or vanish (counted written,
 * never delivered), LOSSES in all. A heartbeat answer carries the receiver's in_seq (maybe a
 * stale one); note_ack drops the acknowledged prefix and, when what was written is overdue,
 * sends everything unacknowledged again, in order, on a fresh connection. Overdue is `timeout`
 * (nothing else can happen: the message is lost) or one of EARLY early resends (an answer that
 * was only late). What an old connection still carries may be delivered later, interleaved with
 * the new one's, or dropped (its reset).
 *
 * The receiver takes a message from any connection, one at a time (lockd's in_mu): a duplicate
 * (seq <= in_seq) or one after a gap (seq > in_seq + 1) is dropped, the next one is delivered.
 *
 * Checked (check.sh): every message is delivered once and in order, the sender never drops
 * one that was not delivered (assertions; safety run, invalid end states too); and under weak
 * fairness every message is delivered (LTL `live`, pan -a -f).
 *
 * Broken on purpose (spin must find each): -DNO_DEDUP (duplicates delivered), -DNO_GAP_CHECK
 * (a message after a gap delivered), -DNO_RESEND (lost messages never sent again),
 * -DACK_WRITTEN (the sender drops what it wrote, not what was acknowledged).
 *
 * Not modelled: a restart of either side. Then lockd drops the queue and begins a new stream
 * (reset_connections(p, true)), and the receiver numbers a new incarnation's messages from the
 * start: the crash of ncosed.pml, which drops what is on its way to the old incarnation.
 */

#ifndef K
#define K 3
#endif
#ifndef LOSSES
#define LOSSES 2
#endif
#ifndef EARLY
#define EARLY 1
#endif
/* Every failed write and every resend opens a new connection (8 at most: TAKE below). */
#define CONNS (1 + 2 * LOSSES + EARLY)
#define MAXC 8

chan conn[MAXC] = [K] of { byte };

/* sender (under msg_mu: each step atomic) */
byte out_seq = 0;    /* messages the engine sent */
byte acked = 0;      /* outbox = (acked, out_seq] */
byte next = 1;       /* first seq not written on the current connection */
byte cur = 0;        /* current connection */
bool open = true;    /* false after a failed write: the next flush reconnects */
byte losses = 0;
byte early = 0;
byte ack_seen = 0;   /* the in_seq of the last heartbeat answer read */

/* receiver (under in_mu) */
byte in_seq = 0;
byte delivered = 0;

inline flush() {
  do
  :: next <= out_seq && !open ->
     assert(cur + 1 < CONNS);
     cur++;
     open = true
  :: next <= out_seq && open ->
     if
     :: conn[cur]!next; next++
     :: losses < LOSSES -> losses++; open = false          /* the write fails */
     :: losses < LOSSES -> losses++; next++                /* written, then lost */
     fi
  :: else -> break
  od
}

inline resend_all() {
  assert(cur + 1 < CONNS);
  cur++;
  open = true;
  next = acked + 1;
  flush()
}

active proctype Sender() {
  assert(CONNS <= MAXC);
end:
  do
  :: atomic { out_seq < K -> out_seq++; flush() }
  :: atomic {
       ack_seen > acked ->
#ifndef ACK_WRITTEN
       acked = ack_seen;
#endif
       if
       :: next <= acked -> next = acked + 1
       :: else -> skip
       fi;
       flush()
     }
#ifdef ACK_WRITTEN
  :: atomic { next - 1 > acked -> acked = next - 1 }
#endif
  :: atomic { early < EARLY && next > acked + 1 -> early++; resend_all() }
#ifndef NO_RESEND
  :: atomic { timeout && next > acked + 1 -> resend_all() }
#endif
  od
}

inline deliver(s) {
  if
#ifdef NO_DEDUP
  :: s <= in_seq -> delivered++; assert(delivered == s)
#else
  :: s <= in_seq -> skip                             /* a duplicate */
#endif
#ifdef NO_GAP_CHECK
  :: s > in_seq + 1 -> in_seq = s; delivered++; assert(delivered == s)
#else
  :: s > in_seq + 1 -> skip                          /* after a gap: re-sent later */
#endif
  :: s == in_seq + 1 -> in_seq = s; delivered++; assert(delivered == s)
  fi
}

/* One option per connection: a process blocked on all of them is at its end label. */
#define TAKE(k) :: atomic { k < CONNS && nempty(conn[k]) -> conn[k]?s; deliver(s) }

active proctype Receiver() {
  byte s;
end:
  do
  TAKE(0) TAKE(1) TAKE(2) TAKE(3) TAKE(4) TAKE(5) TAKE(6) TAKE(7)
  od
}

/* Heartbeat answers: the receiver's in_seq at some moment, read by the sender later (or never:
 * a later answer carries a higher one). */
active proctype Heartbeats() {
  byte snap;
end:
  do
  :: snap < in_seq -> snap = in_seq
  :: snap > ack_seen -> ack_seen = snap
  od
}

/* A reset connection's bytes still in the sender's kernel are gone. */
#define DROP(k) :: atomic { k < cur && nempty(conn[k]) -> conn[k]?s }

active proctype Resets() {
  byte s;
end:
  do
  DROP(0) DROP(1) DROP(2) DROP(3) DROP(4) DROP(5) DROP(6)
  od
}

/* What the sender dropped was delivered; what was delivered was sent, in order (the receiver's
 * assertions). */
active proctype Invariant() {
end:
  atomic { !(acked <= in_seq && delivered == in_seq && in_seq <= out_seq) -> assert(false) }
}

ltl live { <> (delivered == K) }
