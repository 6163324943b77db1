#!/bin/bash
# Follow-up of run.sh: the pages over or near the rule's 1.10 (001 at 50,000 B/s 1.11 after round 1's first run, its
# loads there ~70 ms later than in round 2; hukumusume and ehow-2 1.07; dropbox-blog at 10,000 B/s 1.28 from one 10%
# load). Three more rounds, E first in the first; judged with all rounds together by the same rule.
P=/work/shared/corpus/real-pages
O=/work/runs/s39/ab
for round in 3 4 5; do
  if [ $round = 4 ]; then order="M E"; else order="E M"; fi
  for b in $order; do
    dir=/work/main; [ $b = E ] && dir=/work/E
    (cd $dir && node bin/catp.js silent-time $P/001.html $P/hukumusume.html $P/ehow-2.html --rate 50000 --delay 40 --loss 0,0.1 --reps 2 --seed $((4500 + round * 10)) --transports catp --log $O/k50-$b-$round.jsonl -q > $O/k50-$b-$round.txt 2>&1)
    (cd $dir && node bin/catp.js silent-time $P/dropbox-blog.html --rate 10000 --delay 10 --loss 0,0.1 --reps 2 --seed $((4600 + round * 10)) --transports catp --log $O/k10-$b-$round.jsonl -q > $O/k10-$b-$round.txt 2>&1)
    echo "$(date +%T) done $b round $round" >> $O/progress2.txt
  done
done
echo ALLDONE >> $O/progress2.txt
