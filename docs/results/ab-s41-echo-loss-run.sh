#!/bin/bash
# Session 41, second test of branch s41-echo-attribution (1165d86, /work/N) against 59ac0cb (/work/E), set before its
# data: the change acts only through resends (identical sends at 0% in the simulated bottleneck; no duplicate frame in
# the first A/B's 96 lab loads at 0%), and the sans-IO bottleneck (12 pages x 20 seeds) put its longest gap at 0.955 /
# 0.912 of the old one at 50,000 B/s, 10 / 20% loss, so it is measured there: the twelve pages, loss 10% and 20%, three
# rounds of two loads a point, the order alternating. Kept if the geometric mean over (page, loss) of CATP's mean silent
# time new/old is below 1 and no page's ratio is above 1.10 (no time left for extra rounds on pages near it).
P=/work/shared/corpus/real-pages
PAGES="$P/daringfireball-1.html $P/001.html $P/hukumusume.html $P/v8-blog.html $P/medium-2.html $P/heise.html $P/keep-tabular-data.html $P/ehow-1.html $P/dropbox-blog.html $P/lemonde-1.html $P/ehow-2.html $P/liberation-1.html"
# the raw loads are kept as docs/results/ab-s41-echo-loss-k50-*.jsonl.gz
O=/work/runs/s41/ab3
for round in 1 2 3; do
  seed=$((6000 + round * 100))
  if [ $round = 2 ]; then order="E M"; else order="M E"; fi
  for b in $order; do
    dir=/work/N; [ $b = E ] && dir=/work/E
    (cd $dir && node bin/catp.js silent-time $PAGES --rate 50000 --delay 40 --loss 0.1,0.2 --reps 2 --seed $seed --transports catp --log $O/k50-$b-$round.jsonl -q > $O/k50-$b-$round.txt 2>&1)
    echo "$(date +%T) done k50 $b round $round" >> $O/progress.txt
  done
done
echo ALLDONE >> $O/progress.txt
