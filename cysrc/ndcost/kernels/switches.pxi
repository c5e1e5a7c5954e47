# Recompute as a choice (twin of ndcost/kernels/switches.py): every setting of a layer kind's
# switches priced by additivity, the dominance front of a set of options, and one stage's
# multiple-choice knapsack (docs/ND_MODEL.md §4.4; seed recompute/profile.py).

from libc.stdlib cimport malloc, free
from libc.limits cimport INT_MAX
from cpython.pyport cimport PY_SSIZE_T_MAX

cdef enum:
    SKYLINE_STACK = 512  # options whose skyline buffers fit on the stack (257 per layer kind)
    SKYLINE_BUCKETS = 128  # buckets of the skyline's counting sort
    SETTINGS_STACK = 64  # cost-row widths whose switch delta fits on the stack


cdef void c_switch_settings(const double* plain, const double* alone, Py_ssize_t alone_stride,
                            const Py_ssize_t* bits, Py_ssize_t n_acting, double* out, Py_ssize_t out_stride,
                            Py_ssize_t width, double* delta) noexcept nogil:
    # Rows 2**h .. 2**(h+1) - 1 are rows 0 .. 2**h - 1 plus delta = alone[bits[h]] - plain:
    # each row adds its highest switch last, as SwitchProfile.selective adds them.
    cdef Py_ssize_t h, t, c, half = 1
    cdef const double* source
    cdef double* target
    for c in range(width):
        out[c] = plain[c]
    for h in range(n_acting):
        for c in range(width):
            delta[c] = alone[bits[h] * alone_stride + c] - plain[c]
        for t in range(half):
            source = out + t * out_stride
            target = out + (half + t) * out_stride
            for c in range(width):
                target[c] = source[c] + delta[c]
        half <<= 1


cdef inline bint c_beats(const double* w, Py_ssize_t w_index, const double* x, Py_ssize_t x_index,
                         Py_ssize_t n_criteria, bint* x_beats_w) noexcept nogil:
    # Whether row w dominates row x (<= everywhere, < somewhere; when equal everywhere, the
    # lower index wins); sets x_beats_w for the converse. The first two criteria branch-free.
    cdef Py_ssize_t c
    cdef bint le = True, ge = True
    if n_criteria >= 2:
        le = (w[0] <= x[0]) & (w[1] <= x[1])
        ge = (w[0] >= x[0]) & (w[1] >= x[1])
        c = 2
    else:
        c = 0
    if le or ge:
        while c < n_criteria:
            if not (w[c] <= x[c]):
                le = False
            if not (w[c] >= x[c]):
                ge = False
            if not (le or ge):
                break
            c += 1
    if le and ge:  # equal on every criterion
        le = w_index < x_index
        ge = not le
    x_beats_w[0] = ge and not le
    return le


cdef Py_ssize_t c_skyline(const double* values, Py_ssize_t n, Py_ssize_t stride, Py_ssize_t n_criteria,
                          Py_ssize_t* window, Py_ssize_t* order) noexcept nogil:
    # The rows no row dominates, into window[0 .. returned size).
    #
    # Block-nested-loop skyline (Börzsönyi, Kossmann, Stocker, "The Skyline Operator",
    # ICDE 2001) over the rows in ascending order of their first criterion, bucketed
    # (a counting sort, O(n)). So sorted, a row is mostly dominated by one that joined
    # the window shortly before it or that dominated the row before: the window is
    # scanned from its end, where both go. A row below the window on both first criteria
    # (a new step of their staircase) joins without a scan. Which rows are kept depends
    # on the relation only, not on the order they are visited in.
    cdef Py_ssize_t i, k, p, q, size = 0, bucket, evicted
    cdef Py_ssize_t starts[SKYLINE_BUCKETS + 1]
    cdef double lo = INFINITY, hi = -INFINITY, key, scale = 0.0
    cdef double top_first = -INFINITY, bottom_second = INFINITY  # conservative window bounds
    cdef const double* row
    cdef bint dominated, evicts
    # -- order: counting sort by the first criterion's bucket, index order within a bucket
    for k in range(SKYLINE_BUCKETS + 1):
        starts[k] = 0
    if n_criteria >= 1:
        for i in range(n):
            key = values[i * stride]
            lo = key if key < lo else lo  # NaN passes by
            hi = key if key > hi else hi
        if lo == -INFINITY or hi == INFINITY:  # rare: bucket the finite keys only
            lo = INFINITY
            hi = -INFINITY
            for i in range(n):
                key = values[i * stride]
                if key > -INFINITY and key < INFINITY:
                    lo = key if key < lo else lo
                    hi = key if key > hi else hi
        if hi > lo and hi - lo < INFINITY:
            scale = (SKYLINE_BUCKETS - 1) / (hi - lo)
            if not (scale < INFINITY):  # keys a few subnormals apart
                scale = 0.0
    for i in range(n):
        bucket = 0
        if scale > 0.0:
            key = values[i * stride]
            if key >= lo and key <= hi:
                bucket = <Py_ssize_t>((key - lo) * scale)
                if bucket > SKYLINE_BUCKETS - 1:
                    bucket = SKYLINE_BUCKETS - 1
            elif not (key < lo):  # +inf and NaN last
                bucket = SKYLINE_BUCKETS - 1
        window[i] = bucket  # scratch until the scan
        starts[bucket + 1] += 1
    for k in range(SKYLINE_BUCKETS):
        starts[k + 1] += starts[k]
    for i in range(n):
        order[starts[window[i]]] = i
        starts[window[i]] += 1
    # -- scan
    for k in range(n):
        i = order[k]
        row = values + i * stride
        if n_criteria >= 2 and row[0] > top_first and row[1] < bottom_second:
            window[size] = i  # below the whole window on the first two criteria
            size += 1
            top_first = row[0]
            bottom_second = row[1]
            continue
        dominated = False
        evicted = 0
        p = size
        while p > 0:
            p -= 1
            if c_beats(values + window[p] * stride, window[p], row, i, n_criteria, &evicts):
                dominated = True
                # The dominator goes to the end, scanned first: dominated rows share dominators.
                q = window[p]
                window[p] = window[size - 1]
                window[size - 1] = q
                break
            if evicts:
                window[p] = -1
                evicted += 1
        if evicted:
            q = 0
            for p in range(size):
                if window[p] >= 0:
                    window[q] = window[p]
                    q += 1
            size = q
        if not dominated:
            window[size] = i
            size += 1
            if n_criteria >= 2:
                if row[0] > top_first:
                    top_first = row[0]
                if row[1] < bottom_second:
                    bottom_second = row[1]
    return size


cdef inline long long c_lightest(const long long* weights, Py_ssize_t first, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t o
    cdef long long lo = weights[first]
    for o in range(first + 1, end):
        if weights[o] < lo:
            lo = weights[o]
    return lo


cdef double c_mck(const long long* weights, const double* values, const long long* group_start,
                  Py_ssize_t n_groups, Py_ssize_t cap, double* best, double* cur, int* choice,
                  long long* out_choice) noexcept nogil:
    # best[b]: least time of the groups so far within b buckets (weights shifted by each
    # group's lightest option); choice[g, b]: the option of group g that reaches it.
    cdef Py_ssize_t g, o, b, s0, s1, shifted
    cdef unsigned long long shifted_u
    cdef long long lo
    cdef double value, candidate, total
    cdef double* swap
    cdef int* pick
    for b in range(cap + 1):
        best[b] = 0.0
    for g in range(n_groups):
        s0 = group_start[g]
        s1 = group_start[g + 1]
        lo = c_lightest(weights, s0, s1)
        pick = choice + g * (cap + 1)
        for b in range(cap + 1):
            cur[b] = INFINITY
            pick[b] = -1
        for o in range(s0, s1):
            shifted_u = <unsigned long long>weights[o] - <unsigned long long>lo  # exact: weights[o] >= lo
            if shifted_u > <unsigned long long>cap:
                continue
            shifted = <Py_ssize_t>shifted_u
            value = values[o]
            for b in range(shifted, cap + 1):
                candidate = best[b - shifted] + value
                if candidate < cur[b]:  # strict: the lowest index keeps a tie
                    cur[b] = candidate
                    pick[b] = <int>(o - s0)
        swap = best
        best = cur
        cur = swap
    total = best[cap]
    if not (total < INFINITY):
        return INFINITY
    b = cap
    for g in range(n_groups - 1, -1, -1):
        s0 = group_start[g]
        o = choice[g * (cap + 1) + b]
        out_choice[g] = o
        lo = c_lightest(weights, s0, group_start[g + 1])
        b -= <Py_ssize_t>(<unsigned long long>weights[s0 + o] - <unsigned long long>lo)
    return total


def switch_settings(const double[::1] plain, const double[:, ::1] alone, long long acting_mask,
                    double[:, ::1] out) -> None:
    """Price every setting of the acting switches by additivity.

    Row *r* of *out* recomputes acting switch *j* (the *j*-th set bit of
    *acting_mask*, from bit 0) exactly when bit *j* of *r* is set:
    ``plain + Σ (alone[s] − plain)``, summed from the lowest switch up. Row 0 is *plain*.
    """
    cdef Py_ssize_t width = plain.shape[0], n_switches = alone.shape[0]
    cdef Py_ssize_t s, alone_stride, out_stride, n_acting = 0
    cdef Py_ssize_t bits[64]
    cdef double stack_delta[SETTINGS_STACK]
    cdef double* delta = stack_delta
    if acting_mask < 0 or (n_switches < 63 and (acting_mask >> n_switches) != 0):
        raise ValueError(f"acting_mask must name rows of alone (bits 0..{n_switches - 1}); got {acting_mask}")
    for s in range(63):
        if (acting_mask >> s) & 1:
            bits[n_acting] = s
            n_acting += 1
    if n_switches and alone.shape[1] != width:
        raise ValueError(f"alone must have one row of plain's width ({width}) per switch; got width {alone.shape[1]}")
    if out.shape[0] != (<Py_ssize_t>1 << n_acting) or (out.shape[0] and out.shape[1] != width):
        raise ValueError(f"out must have 2**{n_acting} rows of plain's width ({width}); "
                         f"got shape ({out.shape[0]}, {out.shape[1]})")
    if width == 0:
        return
    if width > SETTINGS_STACK:
        delta = <double*>malloc(width * sizeof(double))
        if delta == NULL:
            raise MemoryError()
    alone_stride = alone.strides[0] // sizeof(double) if n_switches else 0
    out_stride = out.strides[0] // sizeof(double)
    with nogil:
        c_switch_settings(&plain[0], &alone[0, 0] if n_switches else NULL, alone_stride, bits, n_acting,
                          &out[0, 0], out_stride, width, delta)
    if delta != stack_delta:
        free(delta)


def dominance_front(const double[:, ::1] values, long long n_criteria, const long long[::1] always_keep,
                    long long[::1] out_keep) -> None:
    """Mark the rows of *values* that no other row dominates (1 kept, 0 dominated).

    Row *j* dominates row *i* when <= on each of the first *n_criteria* columns and
    < on one; of rows equal on every criterion the lowest index stays. NaN compares
    neither way. Rows in *always_keep* are kept regardless.
    """
    cdef Py_ssize_t n = values.shape[0], width = values.shape[1] if values.shape[0] else 0
    cdef Py_ssize_t i, k, p, size, stride
    cdef Py_ssize_t stack_window[SKYLINE_STACK]
    cdef Py_ssize_t stack_order[SKYLINE_STACK]
    cdef Py_ssize_t* window = stack_window
    cdef Py_ssize_t* order = stack_order
    cdef const double* data
    cdef double no_data = 0.0
    if n_criteria < 0 or (n and n_criteria > width):
        raise ValueError(f"n_criteria must be in [0, values' width ({width})]; got {n_criteria}")
    if out_keep.shape[0] != n:
        raise ValueError(f"out_keep must have one entry per row of values ({n}); got {out_keep.shape[0]}")
    for k in range(always_keep.shape[0]):
        if always_keep[k] < 0 or always_keep[k] >= n:
            raise ValueError(f"always_keep must hold row indices of values (0..{n - 1}); got {always_keep[k]}")
    if n == 0:
        return
    if n > SKYLINE_STACK:
        window = <Py_ssize_t*>malloc(2 * n * sizeof(Py_ssize_t))
        if window == NULL:
            raise MemoryError()
        order = window + n
    if width:
        data = &values[0, 0]
        stride = values.strides[0] // sizeof(double)
    else:  # no criteria to read: every row is equal
        data = &no_data
        stride = 0
    with nogil:
        size = c_skyline(data, n, stride, n_criteria, window, order)
        for i in range(n):
            out_keep[i] = 0
        for p in range(size):
            out_keep[window[p]] = 1
        for k in range(always_keep.shape[0]):
            out_keep[always_keep[k]] = 1
    if window != stack_window:
        free(window)


def mck_min_time(const long long[::1] weights, const double[::1] values, const long long[::1] group_start,
                 long long budget_buckets, long long[::1] out_choice) -> float:
    """Least total time of one option per group within a weight budget (multiple-choice knapsack).

    Group g offers options group_start[g] .. group_start[g+1] - 1; returns the least
    Σ value with Σ weight <= budget_buckets and writes each group's chosen index within
    the group; +inf and -1 everywhere when nothing fits. Ties: the last group's lowest
    index, then the group before it, and so on.
    """
    cdef Py_ssize_t n_options = weights.shape[0], n_groups, g, o, cap
    cdef long long lo, hi
    cdef object left, spread, capacity
    cdef double total
    cdef double* best
    cdef double* cur
    cdef int* choice
    if values.shape[0] != n_options:
        raise ValueError(f"values must have one entry per option ({n_options}); got {values.shape[0]}")
    if group_start.shape[0] < 1:
        raise ValueError("group_start must hold n_groups + 1 offsets; got none")
    n_groups = group_start.shape[0] - 1
    if out_choice.shape[0] != n_groups:
        raise ValueError(f"out_choice must have one entry per group ({n_groups}); got {out_choice.shape[0]}")
    if group_start[0] != 0 or group_start[n_groups] != n_options:
        raise ValueError(f"group_start must rise from 0 to the number of options ({n_options})")
    for g in range(n_groups):
        if group_start[g] > group_start[g + 1]:
            raise ValueError(f"group_start must rise from 0 to the number of options ({n_options})")
    for g in range(n_groups):
        out_choice[g] = -1
    # Budget left over the lightest plan, and the most the shifted options weigh together,
    # in Python integers: no overflow whatever the weights.
    left = budget_buckets
    spread = 0
    for g in range(n_groups):
        if group_start[g] == group_start[g + 1]:
            return INFINITY
        if group_start[g + 1] - group_start[g] > INT_MAX:
            raise ValueError(f"group_start must give each group at most {INT_MAX} options")
        lo = hi = weights[group_start[g]]
        for o in range(group_start[g] + 1, group_start[g + 1]):
            if weights[o] < lo:
                lo = weights[o]
            elif weights[o] > hi:
                hi = weights[o]
        left -= lo
        spread += <object>hi - <object>lo
    if left < 0:
        return INFINITY
    capacity = min(left, spread)
    if capacity >= (PY_SSIZE_T_MAX // 8) // (n_groups + 2):
        raise MemoryError(f"mck_min_time: {capacity} buckets do not fit in memory; use larger buckets")
    cap = capacity
    best = <double*>malloc((cap + 1) * sizeof(double))
    cur = <double*>malloc((cap + 1) * sizeof(double))
    choice = <int*>malloc((n_groups * (cap + 1) + 1) * sizeof(int))
    if best == NULL or cur == NULL or choice == NULL:
        free(best)
        free(cur)
        free(choice)
        raise MemoryError(f"mck_min_time: {capacity} buckets do not fit in memory; use larger buckets")
    with nogil:
        total = c_mck(&weights[0] if n_options else NULL, &values[0] if n_options else NULL,
                      &group_start[0], n_groups, cap, best, cur, choice,
                      &out_choice[0] if n_groups else NULL)
    free(best)
    free(cur)
    free(choice)
    return total
