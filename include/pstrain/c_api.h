/*
 * pstrain's C API: a worker of a pstrain job driven from any language
 * (python/pstrain is ctypes over it). It is the worker runtime
 * (worker/worker_runtime.h) behind a plain C ABI, in the manner of
 * XGBoost's and LightGBM's C APIs:
 *
 *  - opaque handles; every call returns an int status (PSTRAIN_OK, or one
 *    of the PSTRAIN_ERROR_* codes below) and the message of the last
 *    failed call on this thread is PstrainGetLastError();
 *  - no C++ types or exceptions cross it; sizes are passed explicitly;
 *  - misuse (a null handle or pointer, a wrong size, a call out of order)
 *    returns PSTRAIN_ERROR_USAGE, never crashes the process.
 *
 * A worker's life:
 *
 *   PstrainTaskCreateFromEnv(&task)          who this process is in the job
 *   PstrainWorkerCreate(task, ..., &worker)  joins the job: the chief's
 *                                            params are the job's initial
 *                                            ones; on return params holds
 *                                            the job's parameters
 *   while (!done):                           (PstrainWorkerGetPosition)
 *     PstrainWorkerBeginStep(worker, n)      before backward
 *     ... the caller writes grads, tensor by tensor ...
 *     PstrainWorkerTensorReady(worker, t)    each tensor as its gradient is
 *                                            final (pushes overlap backward)
 *     [PstrainWorkerReduceGradients]         sync: grads becomes the workers'
 *                                            average (DDP's .grad after backward)
 *     [PstrainWorkerSetStepOptions]          the step's parameter groups'
 *                                            settings, the tensors without a
 *                                            gradient
 *     PstrainWorkerEndStep(worker, loss)     returns with params holding the
 *                                            parameters that follow
 *     chief: PstrainWorkerLogEvaluation(...)
 *   PstrainWorkerFinish(worker)              every worker's last gradient is in
 *   chief: PstrainWorkerLogEvaluation(...)   of the final parameters
 *   PstrainWorkerClose(worker)               chief: summary.json, ps shut down
 *   PstrainWorkerFree(worker); PstrainTaskFree(task)
 *
 * Configuration comes from the environment `pstrain launch` (or TFJob, or
 * a user on several hosts) sets, read in one place, PstrainTaskCreateFromEnv:
 *
 *   TF_CONFIG            the cluster and this task (required)
 *   PSTRAIN_SECRET_FILE  the job secret (CURVE); or PSTRAIN_INSECURE=1
 *   PSTRAIN_RUN_DIR      where the step log, evals.csv, summary.json go
 *   PSTRAIN_FLAGS        the job's flags as a JSON array of "--name=value"
 *                        (the flags of the `worker` binary: --mode,
 *                        --staleness, --backup_workers, --wire,
 *                        --checkpoint_every_steps, --timeline, ...)
 *
 * Thread safety: PstrainGetLastError, PstrainVersion and
 * PstrainPermutation are safe from any thread. A handle is not: calls on
 * one handle must not overlap in time, though they may come from
 * different threads one after another (autograd's backward threads call
 * PstrainWorkerTensorReady). Different handles are independent.
 *
 * Blocking: PstrainWorkerCreate(WithState), ReduceGradients, EndStep,
 * GetOptimizerState, Finish and Close wait for the ps tasks; the other
 * calls do not. A wait ends when the ps answers, when a ps or the job is
 * found dead (--peer_timeout_s; --connect_timeout_s to reach one,
 * --recovery_timeout_s for a recovery), or after --rpc_timeout_s when it
 * is set (0 by default: a sync step waits for its slowest worker).
 */
#ifndef PSTRAIN_C_API_H_
#define PSTRAIN_C_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PSTRAIN_C_API_VERSION 10

/* Status codes. */
#define PSTRAIN_OK 0
/* Failed at run time: a ps that cannot be reached, a refusal, a file that
 * cannot be written. The worker may not be used again but to free it. */
#define PSTRAIN_ERROR_FAILED 1
/* Bad configuration: the environment, a flag, the layout, the job's
 * options (a process exits 2 for it, and is not restarted). */
#define PSTRAIN_ERROR_CONFIG 2
/* Misuse: a null handle or pointer, a wrong size, a call out of order.
 * Nothing happened; the handle is as it was. */
#define PSTRAIN_ERROR_USAGE 3
/* The job finished without this worker (it was frozen, or declared dead,
 * meanwhile): nothing is left for it to do. */
#define PSTRAIN_JOB_FINISHED 4

typedef struct PstrainTask* PstrainTaskHandle;
typedef struct PstrainWorker* PstrainWorkerHandle;

/* PSTRAIN_C_API_VERSION of the library. */
int PstrainVersion(void);

/* The message of the last call on this thread that did not return
 * PSTRAIN_OK ("" if none). Owned by the library; valid until the next
 * call on this thread. */
const char* PstrainGetLastError(void);

/* ---- The task ----------------------------------------------------------- */

/* Reads the environment above (the only place the library reads it) and
 * resolves this process's task. */
int PstrainTaskCreateFromEnv(PstrainTaskHandle* out);

/* The same from explicit values, each a NUL-terminated string: `tf_config`
 * (required), `secret_file` ("" with insecure != 0), `run_dir` ("" for no
 * files) and `flags_json` (a JSON array of "--name=value", "" for none). */
int PstrainTaskCreate(const char* tf_config, const char* secret_file, int insecure,
                      const char* run_dir, const char* flags_json, PstrainTaskHandle* out);

/* Frees the task. NULL is allowed. REQUIRES: every worker made from it
 * is freed. */
int PstrainTaskFree(PstrainTaskHandle task);

/* Ranks 0 .. num_workers - 1 over the chief and the workers; the chief is
 * rank 0. `dynamic`: a sparse TF_CONFIG (TFJob enableDynamicWorker), whose
 * workers each train on the whole data set in an order of their own. */
int PstrainTaskGetRank(PstrainTaskHandle task, int* rank, int* num_workers, int* is_chief,
                       int* dynamic);

/* The run directory ("" for none). The string belongs to the task. */
int PstrainTaskGetRunDir(PstrainTaskHandle task, const char** run_dir);

/* The job a worker of this task with job options `job_json` (as
 * PstrainWorkerCreate takes them; "" for none) would start, as a JSON
 * object: "mode" ("sync", "async", "ssp"), "num_workers",
 * "backup_workers", "staleness", "optimizer" ("sgd", "adam", "adamw",
 * "adagrad") and its options as the ps would apply them ("lr": the given
 * one, or the default for the job's flags; "momentum", "nesterov",
 * "weight_decay", "beta1", "beta2", "eps", "lr_decay",
 * "initial_accumulator"). Nothing is contacted. The string belongs to the
 * task, valid until its next call of this function.
 * PSTRAIN_ERROR_CONFIG for a bad option. */
int PstrainTaskDescribeJob(PstrainTaskHandle task, const char* job_json, const char** json);

/* ---- The worker --------------------------------------------------------- */

/* Joins the job with a layout of `num_tensors` tensors named names[i] (UTF-8,
 * 1 to 4096 bytes) of sizes[i] floats, laid end to end in the flat buffers
 * `params` and `grads` of `num_floats` floats each (the sum of sizes, at
 * most 2^48). Both buffers are the
 * caller's and are borrowed: they must stay alive, and not move, until
 * PstrainWorkerFree. The chief's `params` hold the job's initial
 * parameters (a fresh job); on return every worker's `params` hold the
 * job's parameters at its position (a restarted process: where the job
 * is). The library reads `grads` at TensorReady and EndStep and writes
 * `params` only inside EndStep, Finish and Create (and, forward ahead,
 * Land, LogEvaluation and GetOptimizerState).
 *
 * `job_json`: a JSON object of this worker's job options over the job's
 * flags: any flag of PSTRAIN_FLAGS by name ({"optimizer": "adam", "lr":
 * 0.001, "lr_schedule": "cosine", "batch_size": 64, "epochs": 2}, ...),
 * plus "steps_per_epoch" and "total_steps" (the job's length: without
 * either the job is open-ended and ends when the script calls Finish),
 * "device" (for the summary), "tensor_groups" (an array: each tensor's
 * parameter group, 0 to 1023; default all 0) and "forward_ahead" (true:
 * async and ssp jobs without embedding tables or dynamic workers;
 * PstrainWorkerEndStep then sends the step and returns at once, `params`
 * holding the parameters the step before brought, and the script
 * computes its next step on them while this one's reply comes in: each
 * gradient is one update staler; PstrainWorkerLand). "" for none.
 *
 * PSTRAIN_ERROR_CONFIG when the layout differs from the chief's (the
 * message names the first differing tensor) or the job's options do.
 * Blocks until every ps answers and the chief has initialised the job. */
int PstrainWorkerCreate(PstrainTaskHandle task, const char* job_json, int num_tensors,
                        const char* const* names, const int64_t* sizes, float* params,
                        float* grads, int64_t num_floats, PstrainWorkerHandle* out);

/* PstrainWorkerCreate with the chief's initial optimizer state (a
 * script's loaded optimizer): `slots`, `slots_floats` = NumSlots x
 * num_floats floats, slot k of flat position i at slots[k * num_floats +
 * i] (sgd: momentum_buffer; adam, adamw: exp_avg, exp_avg_sq; adagrad:
 * sum), and `tensor_steps`, each tensor's optimizer steps taken (Adam's t),
 * num_tensors of them. Copied; a fresh job's shards start from them, a job
 * under way keeps its own. Other workers: as PstrainWorkerCreate. */
int PstrainWorkerCreateWithState(PstrainTaskHandle task, const char* job_json, int num_tensors,
                                 const char* const* names, const int64_t* sizes, float* params,
                                 float* grads, int64_t num_floats, const float* slots,
                                 int64_t slots_floats, const int64_t* tensor_steps,
                                 PstrainWorkerHandle* out);

/* Frees the worker (closing its connections). NULL is allowed. */
int PstrainWorkerFree(PstrainWorkerHandle worker);

/* Where the job is for this worker: the next step it computes
 * (`global_step`), of `total_steps` per worker, `steps_per_epoch`, and
 * whether it has no step left (`done`). The position moves by EndStep, and
 * by a rejoin inside EndStep (back to a checkpoint, or ahead to where the
 * shards are): drive the data by it. Any pointer may be NULL. */
int PstrainWorkerGetPosition(PstrainWorkerHandle worker, int64_t* global_step,
                             int64_t* total_steps, int64_t* steps_per_epoch, int* done);

/* How many times this worker has rejoined the job (a ps restarted, or was
 * lost and failed over), in any call: each rejoin may have rewritten
 * `params` with the job's parameters. A caller that checks its parameters
 * for changes of its own takes them anew when the count moves. */
int PstrainWorkerGetRejoins(PstrainWorkerHandle worker, int64_t* rejoins);

/* The shards' versions of the parameters `params` holds now (how many
 * updates each shard had applied when it answered; one shard's in sync is
 * the job's step): the lowest and the highest. A fresh job's are 0 until
 * its first update, so a worker joining one under way (async, a restart,
 * a resume) sees more. Either pointer may be NULL. */
int PstrainWorkerGetVersions(PstrainWorkerHandle worker, int64_t* lowest, int64_t* highest);

/* Starts step `global_step` on a batch of `num_examples` examples (0 to
 * 2^24) on this worker (0: a zero gradient of weight 0, when the last
 * global batch has none for it). REQUIRES: no step begun, not done. */
int PstrainWorkerBeginStep(PstrainWorkerHandle worker, int num_examples);

/* The step's examples are `num_examples` after all: a caller that begins
 * the step before it knows (at its forward) and then has no gradient (no
 * backward ran) says 0, and adds nothing to a sync step's average (its
 * push, and its ReduceGradients calls from here). REQUIRES: a step begun,
 * no tensor of it ready (PstrainWorkerTensorReady). */
int PstrainWorkerSetStepExamples(PstrainWorkerHandle worker, int num_examples);

/* Tensor `tensor`'s gradient in `grads` is final for this step: every
 * shard whose gradient is all final goes out now. Each tensor at most once
 * a step; optional (EndStep sends what is left). REQUIRES: a step begun. */
int PstrainWorkerTensorReady(PstrainWorkerHandle worker, int tensor);

/* Whether the job writes a timeline (--timeline): *on is 1 or 0. A caller
 * records its layers' spans (PstrainWorkerLayerSpan) only then. */
int PstrainWorkerTimeline(PstrainWorkerHandle worker, int* on);

/* A span of the step under way for the timeline: layer `layer`'s forward
 * (backward 0) or backward (1) pass, from `start_unix_us` (microseconds of
 * the Unix clock) for `duration_us`; drawn as "forward <layer>" or
 * "backward <layer>" inside the step's compute span. Nothing without a
 * timeline; past 65,536 spans in a step or 4,096 names in all the rest are
 * left out (one warning in the log). Usage errors: no step under way, a
 * null or empty name, a negative start, a duration outside [0, a day].
 * REQUIRES: a step begun. */
int PstrainWorkerLayerSpan(PstrainWorkerHandle worker, const char* layer, int backward,
                           int64_t start_unix_us, int64_t duration_us);

/* Parameter groups (torch.optim's param_groups): each tensor is in the
 * group "tensor_groups" gives it; each group has its own optimizer
 * settings at each step, PSTRAIN_GROUP_FIELDS doubles in this order. */
#define PSTRAIN_GROUP_LR 0
#define PSTRAIN_GROUP_WEIGHT_DECAY 1
#define PSTRAIN_GROUP_MOMENTUM 2     /* sgd */
#define PSTRAIN_GROUP_NESTEROV 3     /* sgd: 0 or 1 */
#define PSTRAIN_GROUP_BETA1 4        /* adam, adamw */
#define PSTRAIN_GROUP_BETA2 5        /* adam, adamw */
#define PSTRAIN_GROUP_EPS 6          /* adam, adamw, adagrad */
#define PSTRAIN_GROUP_LR_DECAY 7     /* adagrad */
#define PSTRAIN_GROUP_FIELDS 8

/* The step's optimizer settings, which the ps applies instead of the job's
 * optimizer options and schedule: `num_groups` groups' settings
 * (settings[g * PSTRAIN_GROUP_FIELDS + field], the fields above; each
 * optimizer reads its own) and the `num_absent` tensors that have no
 * gradient this step (`absent`, any order): as torch.optim, the ps leaves
 * those alone (no update, no momentum, no weight decay, no step count; in
 * sync, a tensor every worker says is absent). Every push from then on
 * carries them, until they are set again: call it in a step whose
 * settings differ from the last ones set, before TensorReady and EndStep.
 * PSTRAIN_ERROR_CONFIG for a value the optimizer refuses (a momentum of 1,
 * a negative lr); usage errors for a group count other than the layout's
 * or a tensor outside it. REQUIRES: a step begun. */
int PstrainWorkerSetStepOptions(PstrainWorkerHandle worker, int num_groups, const double* settings,
                                int num_absent, const int* absent);

/* Sync: sends this step's gradient (grads; `absent`: the tensors without
 * one here) toward the workers' average and waits for it, into grads: what
 * DDP's .grad holds after backward, so that clipping, unscaling and an
 * inf check between backward and step see the whole global batch's
 * gradient. absent_everywhere (num_tensors ints, the caller's) gets 1 for
 * each tensor no worker had a gradient for. *reduced is 0 when no average
 * came: the job went past this step without this worker (its push is then
 * dropped), a ps went away and was rejoined (the step is void: EndStep
 * pushes nothing; the position may have moved; PstrainWorkerGetRejoins
 * counts it), or the round was out of order (a round this worker had
 * already been answered in, as after a ps failed over mid-step; its push
 * counts as any). Blocks until every live
 * worker's gradient is in: in a sync job every worker calls it in a step
 * where any does (one without a gradient with every tensor absent, after
 * PstrainWorkerSetStepExamples(worker, 0): it adds nothing). Usage errors
 * in a job that is not sync or has backup workers. REQUIRES: a step
 * begun. */
int PstrainWorkerReduceGradients(PstrainWorkerHandle worker, int num_absent, const int* absent,
                                 int* absent_everywhere, int* reduced);

/* The optimizer's state on the ps tasks (a script's state_dict): *num_slots
 * (sgd 1, adam and adamw 2, adagrad 1); with `slots` and `tensor_steps`
 * (both NULL: only the count), the slots as PstrainWorkerCreateWithState
 * takes them (`slots_floats` must be num_slots x num_floats) and each
 * tensor's steps taken (num_tensors values). In async the shards move on
 * while they are read. REQUIRES: no step begun. */
int PstrainWorkerGetOptimizerState(PstrainWorkerHandle worker, int* num_slots, float* slots,
                                   int64_t slots_floats, int64_t* tensor_steps);

/* Sends the rest of the step's gradient and waits for the parameters that
 * follow, into `params`; records the step (`loss`, NaN for none) in the
 * step log. A ps that restarted, or was lost and failed over, is rejoined
 * inside the call: the position may then have moved
 * (PstrainWorkerGetPosition). PSTRAIN_JOB_FINISHED: the job ended without
 * this worker. Forward ahead: takes the step before's reply, sends this
 * step's gradient (copied from `grads`) and returns, `params` holding the
 * parameters the step before brought; a rejoin in the step before voids
 * this step (nothing of it is sent). REQUIRES: a step begun. */
int PstrainWorkerEndStep(PstrainWorkerHandle worker, double loss);

/* Forward ahead (the job option "forward_ahead"): takes the reply of the
 * step in flight now, into `params` (the newest parameters, for an
 * evaluation or a state_dict); a failure is the one the next EndStep
 * would return. Nothing without a step in flight. REQUIRES: no step
 * begun. */
int PstrainWorkerLand(PstrainWorkerHandle worker);

/* Chief: an evaluation of the model on the test set, into evals.csv,
 * TensorBoard and Prometheus, and at an epoch's end epochs.csv; the last
 * one is summary.json's final_test_accuracy. `seconds` is how long the
 * evaluation took, at most a year (< 0: the time since the last step
 * ended; NaN is a usage error). A worker
 * that is not the chief: nothing is recorded. */
int PstrainWorkerLogEvaluation(PstrainWorkerHandle worker, double accuracy, double loss,
                               double seconds);

/* Once this worker's loop is over: waits until every worker has pushed
 * its last gradient (the final BARRIER); the chief then pulls the final
 * parameters into `params`. A worker with steps left (its loop ended
 * before the job's) leaves the job here, said in its log: the ps tasks no
 * longer wait for it, and the others train on. REQUIRES: no step begun. */
int PstrainWorkerFinish(PstrainWorkerHandle worker);

/* Chief, after Finish: writes summary.json and final_params.f32 into the
 * run directory and shuts every ps down. Other workers: nothing. */
int PstrainWorkerClose(PstrainWorkerHandle worker);

/* ---- Embedding tables ---------------------------------------------------- */

/* A job's embedding tables are rows of floats by int64 id, held by the ps
 * tasks (only the rows a step touches travel): the job option
 * "embedding_tables" of PstrainWorkerCreate, an array of objects with
 * "name" (required), "dim" (required), "num_embeddings" (0 or absent: any
 * id), "optimizer" ("sgd", "adagrad" or "adam": torch.optim's SGD,
 * Adagrad and SparseAdam on a sparse gradient), "lr", "eps", "beta1",
 * "beta2", "initial_accumulator", "init" ("normal", the default, or
 * "uniform") with "init_std" (default 1: nn.Embedding's N(0, 1)),
 * "admit_after" (an id has a row once this many updates touched it;
 * until then it reads as zeros), "evict_after_steps" (a row untouched for
 * this many of its ps's embedding updates is dropped) and
 * "max_rows_per_ps"; --embedding_memory_mb caps each ps's rows of all
 * tables. Every worker gives the same tables in the same order;
 * checkpoints hold their rows, and a hot standby (--ps_replicas) holds
 * them too. */

/* Table `table`'s rows of the `num_ids` distinct ids `ids` into `rows`
 * (num_ids x dim floats, the caller's), as the ps tasks hold them now: an
 * id without a row reads as its initial row (PstrainEmbeddingInitialRows),
 * or as zeros until it is admitted. In sync after EndStep the rows are
 * those of the versions this worker pulled; inside a step, where the step
 * before prefetched the table's same ids (PstrainWorkerEmbeddingPrefetch),
 * the rows it brought. Any time between Create and Free; inside a step, a
 * ps that restarted voids the step. */
int PstrainWorkerEmbeddingPull(PstrainWorkerHandle worker, int table, int64_t num_ids,
                               const int64_t* ids, float* rows);

/* PstrainWorkerEmbeddingPull of `num_tables` tables at once, in one
 * request to each ps: table tables[k]'s rows of the num_ids[k] distinct
 * ids ids[k] into rows[k] (num_ids[k] x its dim), for k < num_tables (a
 * table may come more than once). A forward of many tables then waits for
 * one reply per ps, not one per table. */
int PstrainWorkerEmbeddingPullTables(PstrainWorkerHandle worker, int num_tables, const int* tables,
                                     const int64_t* num_ids, const int64_t* const* ids,
                                     float* const* rows);

/* Async: asks for the next step's rows of tables[k]'s num_ids[k]
 * distinct ids ids[k] (copied), k < num_tables, behind the next EndStep's
 * push: the request goes out right after the dense gradient, on the same
 * connections, and EndStep waits for its answer with the push's, so the
 * rows come with that push applied and the step and the next step's rows
 * take one round trip, not two. A pull (Pull or PullTables) inside the
 * step after it, of a table's same ids in the same order, takes its rows
 * from it; a pull between steps asks the ps. What no pull took is dropped
 * at the next push, or when a call fails. Calling it again before EndStep
 * replaces a table's ids. A usage error when what is staged for one step
 * would be more than 2^24 ids, or rows over --max_message_mb. A ps that
 * refuses the prefetch fails nothing: that step's forward asks. Sync and
 * SSP: checked, and nothing more (a ps answers a pull at once, and the
 * rows would not be those of the step's reply: sync makes the version
 * once every worker's push is in, SSP may hold the reply back). */
int PstrainWorkerEmbeddingPrefetch(PstrainWorkerHandle worker, int num_tables, const int* tables,
                                   const int64_t* num_ids, const int64_t* const* ids);

/* How many table reads a prefetch answered so far (into *tables). */
int PstrainWorkerEmbeddingPrefetched(PstrainWorkerHandle worker, int64_t* tables);

/* The step's gradient of table `table`: `grads` (num_ids x dim floats) of
 * the `num_ids` distinct ids `ids` (copied), sent at EndStep before the
 * dense gradient, to be applied at learning rate `lr` (a schedule's; < 0:
 * the table's "lr"; in sync, the lowest pushing rank's). Each table at most once a step; a table without one is
 * left alone this step (no update, no step count), as torch.optim leaves
 * a parameter whose .grad is None. Sync averages the workers' row
 * gradients weighted by their examples; async and SSP apply each on
 * arrival. REQUIRES: a step begun. */
int PstrainWorkerEmbeddingGrad(PstrainWorkerHandle worker, int table, int64_t num_ids,
                               const int64_t* ids, const float* grads, double lr);

/* The initial rows of a table of `dim` floats (uniform 0: N(0, init_std^2);
 * 1: U(-init_std, init_std)), the job's `table_index`-th, in a job of
 * `seed`, of the `num_ids` ids `ids` into `rows` (num_ids x dim): what
 * the ps tasks start every row from, for a one-process reference. */
int PstrainEmbeddingInitialRows(int dim, int uniform, double init_std, uint64_t seed,
                                int table_index, int64_t num_ids, const int64_t* ids,
                                float* rows);

/* ---- Data --------------------------------------------------------------- */

/* The permutation of [0, num_examples) that epoch `epoch` of a job seeded
 * with `seed` visits the data in (the C++ worker's DataSharder): global
 * batch s is positions [s*G, (s+1)*G) of it with G = num_workers x batch
 * size, and worker r takes every num_workers-th of those from r. Writes
 * num_examples values into `out` (the caller's). */
int PstrainPermutation(int64_t num_examples, uint64_t seed, int epoch, int64_t* out);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PSTRAIN_C_API_H_ */
