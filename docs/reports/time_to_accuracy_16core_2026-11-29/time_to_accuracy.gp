set terminal pngcairo size 800,500
set output 'time_to_accuracy.png'
set title 'Training seconds to 97% test accuracy, 2 ps, defaults of each mode, 16 cores'
set xlabel 'workers'
set ylabel 'training seconds to 97%'
set key top right
set logscale x 2
set xtics (1, 2, 4, 8, 12)
set xrange [0.8:15]
set yrange [0:*]
set grid
plot 'time_to_accuracy.dat' index 0 with linespoints lw 2 title 'sync', 'time_to_accuracy.dat' index 1 with linespoints lw 2 title 'async', 'time_to_accuracy.dat' index 2 with linespoints lw 2 title 'ssp:2'
