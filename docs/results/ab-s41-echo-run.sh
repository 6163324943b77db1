#!/bin/bash
# Session 41 A/B: echoes attributed to the send they name (Karn), delivered bytes from the report's missing list,
# resends a later report shows received passed over (/work/main, uncommitted on 59ac0cb; committed after as 1165d86 on branch s41-echo-attribution) against 59ac0cb (/work/E),
# twelve lab pages, CATP. Landing rule, set before any data: kept if, at each link, the geometric mean over (page,
# loss) points of CATP's mean silent time new/old is below 1, and no page's ratio (geometric mean over its two
# losses) is above 1.10 (pages over or near it after two rounds get three more rounds, judged all together).
P=/work/shared/corpus/real-pages
PAGES="$P/daringfireball-1.html $P/001.html $P/hukumusume.html $P/v8-blog.html $P/medium-2.html $P/heise.html $P/keep-tabular-data.html $P/ehow-1.html $P/dropbox-blog.html $P/lemonde-1.html $P/ehow-2.html $P/liberation-1.html"
# the raw loads are kept as docs/results/ab-s41-echo-k*.jsonl.gz
O=/work/runs/s41/ab2
for round in 1 2; do
  for link in "10000 10 k10" "50000 40 k50"; do
    set -- $link
    seed=$((5600 + round * 100 + ($1 == 50000 ? 0 : 50)))
    if [ $round = 1 ]; then order="M E"; else order="E M"; fi
    for b in $order; do
      dir=/work/main; [ $b = E ] && dir=/work/E
      (cd $dir && node bin/catp.js silent-time $PAGES --rate $1 --delay $2 --loss 0,0.1 --reps 2 --seed $seed --transports catp --log $O/$3-$b-$round.jsonl -q > $O/$3-$b-$round.txt 2>&1)
      echo "$(date +%T) done $3 $b round $round" >> $O/progress.txt
    done
  done
done
echo ALLDONE >> $O/progress.txt
