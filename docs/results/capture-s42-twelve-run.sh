#!/bin/bash
# Session 42: the twelve pages at 50,000 B/s / 40 ms, loss 0 and 10%, two loads a point, four transports, measured
# with each capture (--capture vsync, the default, and --capture damage) on the same seeds. Round 1: seed 4200,
# damage then vsync; round 2: seed 4300, vsync then damage. Raw loads: capture-s42-twelve-{vsync,damage}-{1,2}.jsonl.gz
C=${CORPUS:-../shared/corpus}/real-pages
P=""; for p in daringfireball-1 001 hukumusume v8-blog medium-2 heise keep-tabular-data ehow-1 dropbox-blog lemonde-1 ehow-2 liberation-1; do P="$P $C/$p.html"; done
round() { # SEED FIRST SECOND N
  for m in "$2" "$3"; do
    catp silent-time $P --rate 50000 --delay 40 --loss 0,0.1 --reps 2 --seed "$1" --transports catp,inorder,tcp,chromium \
      --capture "$m" --log "capture-s42-twelve-$m-$4.jsonl"
  done
}
round 4200 damage vsync 1
round 4300 vsync damage 2
