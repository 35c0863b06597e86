"""Loads the adapter directory argv[1] onto the embedded model with plain PEFT and prints its
LoRA parameter count: a node's checkpoint opens without swarmnode's own code.
"""

import sys

from peft import PeftModel
from transformers import AutoModelForCausalLM

from swarmnode.train.model import prepare_model

model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(prepare_model("smollm2-135m").path), sys.argv[1])
print(sum(p.numel() for n, p in model.named_parameters() if "lora_" in n))
