#!/usr/bin/env bash
# compute-sanitizer's stand-in for the emulated rehearsal of scripts/gpu_check.sh
# (tests/cuda_emu/gpu_check_rehearsal.sh).  It checks nothing on the device: it takes
# compute-sanitizer's command line, refuses an option or value compute-sanitizer would not
# take (so a typo in gpu_check.sh shows here, not on a GPU's clock), says that no sanitizer
# ran, then runs the program and exits with its status.  Memory errors of the emulated kernels
# are the ASan and TSan modes' business (scripts/cuda_emu_test.sh).
set -u
die() {
  echo "sanitizer_standin: $*" >&2
  exit 2
}
tool=memcheck
while [ $# -gt 0 ]; do
  case $1 in
    --tool)
      case ${2:-} in memcheck | racecheck | synccheck | initcheck) tool=$2 ;; *) die "--tool ${2:-}: not a compute-sanitizer tool" ;; esac
      shift 2
      ;;
    --leak-check)
      case ${2:-} in full | no) ;; *) die "--leak-check ${2:-}: want full or no" ;; esac
      shift 2
      ;;
    --report-api-errors)
      case ${2:-} in all | explicit | no) ;; *) die "--report-api-errors ${2:-}: want all, explicit or no" ;; esac
      shift 2
      ;;
    --target-processes)
      case ${2:-} in all | application-only) ;; *) die "--target-processes ${2:-}: want all or application-only" ;; esac
      shift 2
      ;;
    --error-exitcode | --print-limit)
      [[ ${2:-} =~ ^[0-9]+$ ]] || die "$1 ${2:-}: want a number"
      shift 2
      ;;
    --log-file)
      [ -n "${2:-}" ] || die "--log-file: want a file"
      exec 2>> "$2"
      shift 2
      ;;
    --) shift; break ;;
    -*) die "$1: an option this stand-in does not know (add it here if compute-sanitizer takes it)" ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || die "no program to run"
command -v "$1" > /dev/null || die "$1: no such program"
echo "========= EMULATED rehearsal: no compute-sanitizer ran ($tool); the program's exit status follows" >&2
"$@"
