#!/bin/bash
# Follow-up of run.sh (declared before: pages over or near the rule's 1.10 after two rounds get three more rounds,
# judged with all rounds together by the same rule): liberation-1 (1.19), heise (1.10) and dropbox-blog (1.07) at
# 50,000 B/s; keep-tabular-data (1.09) and ehow-1 (1.07) at 10,000 B/s.
P=/work/shared/corpus/real-pages
O=/work/runs/s40/ab2
for round in 3 4 5; do
  if [ $round = 4 ]; then order="M E"; else order="E M"; fi
  for b in $order; do
    dir=/work/main; [ $b = E ] && dir=/work/E
    (cd $dir && node bin/catp.js silent-time $P/heise.html $P/dropbox-blog.html $P/liberation-1.html --rate 50000 --delay 40 --loss 0,0.1 --reps 2 --seed $((4700 + round * 10)) --transports catp --log $O/k50-$b-$round.jsonl -q > $O/k50-$b-$round.txt 2>&1)
    (cd $dir && node bin/catp.js silent-time $P/keep-tabular-data.html $P/ehow-1.html --rate 10000 --delay 10 --loss 0,0.1 --reps 2 --seed $((4800 + round * 10)) --transports catp --log $O/k10-$b-$round.jsonl -q > $O/k10-$b-$round.txt 2>&1)
    echo "$(date +%T) done $b round $round" >> $O/progress2.txt
  done
done
echo ALLDONE >> $O/progress2.txt
