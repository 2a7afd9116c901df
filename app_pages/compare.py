from ui.compare import compare_page
from ui.experiments_panel import experiment_list

compare_page()
experiment_list()
