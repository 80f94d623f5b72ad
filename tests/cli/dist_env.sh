# Sourced by tests/cli/test_dist_*.sh: what OpenMPI needs to start two ranks
# on one machine in a container (as root, on 2 cores, without ssh or a
# resource manager), and a skip (exit 77) only when mpirun is missing or
# lltrain was built without MPI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm=isolated OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_orte_base_help_aggregate=0 OMPI_MCA_hwloc_base_binding_policy=none
# OpenMPI's own allocations are not ours to report (sanitizer builds)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
MPIRUN=$(command -v mpirun || true)
[ -n "$MPIRUN" ] || { echo "SKIP: mpirun not found (Debian: openmpi-bin; scripts/install_deps.sh installs it)"; exit 77; }
mpirun2() { "$MPIRUN" --oversubscribe --allow-run-as-root -np 2 "$@"; }
