/* backend.h -- the backend: lowering of a scheduled module to per-rank instruction streams
 * (communication placed from the schedule, buffers planned) and its pass (check-stream). The
 * streams themselves -- tables, validator, deadlock checker, binary format, disassembler -- are
 * the stream library (stream.h), which depends on support/ only; the backend adds what needs the
 * IR, the cost model and the simulator. */
#ifndef OCTO_BACKEND_H
#define OCTO_BACKEND_H

#include "ir.h"
#include "stream.h"
#include "support.h"

/* Lower m's plan into a stream. Pre: m verified, with stages placed, a schedule per device and
 * complete layer costs. The reference order of all operations is the simulator's timeline of the
 * plan; each receive is posted at the consumer when its producer starts in that order, each send
 * right after its producer, each WAIT just before the first use, each FREE after the last use,
 * buffers of sends are released once the consumer ran. The stream carries the prediction: the
 * train fields scale and measured_on, the simulator's makespan (pred_step), each rank's busy time
 * (pred_busy) and peak memory (pred_peak), and the simulated start and end of each compute
 * instruction (pred). Returns NULL after reporting through d at 'where' (no plan, no costs, a
 * schedule the simulator rejects). Post: the stream passes be_validate and be_check (a failure
 * there is reported as an internal compiler error). */
be_stream *be_lower(const ir_module *m, diag_engine *d, diag_loc where);

/* Add the backend's passes (check-stream) to the pass registry; tools call it at start-up. */
void be_register_passes(void);

#endif
