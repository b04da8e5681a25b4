# procs.sh -- sourced by kill9.sh and kill_save.sh: rank_procs JOB RANK prints the processes
# among JOB and all its descendants (JOB may be timeout, then mpirun, then the ranks) whose
# environment says they are MPI world rank RANK (OMPI_COMM_WORLD_RANK). (Not a test: lit skips
# Inputs/.)
rank_procs() {
  procs=$1 kids=$1
  while [ -n "$kids" ]; do
    kids=$(for k in $kids; do pgrep -P "$k"; done)
    procs="$procs $kids"
  done
  for p in $procs; do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
    fi
  done
}
