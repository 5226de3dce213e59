# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Chat iterativo: um cache para a conversa inteira
#
# **Objetivo de aprendizagem.** Depois deste notebook, você consegue rodar um loop de chat que passa um único
# `DynamicCache` a cada chamada de `generate`, dizer quantos tokens cada turno realmente pré-preenche e reconhecer a
# única forma pela qual isso dá errado em silêncio: um chat template que renderiza os turnos anteriores de um
# jeito diferente de como eles foram gerados.
#
# **Nas palavras do kvlab.** Um prompt de chat é a conversa inteira até aqui. Com um cache novo a cada turno, o
# modelo relê tudo a cada vez. Passe o *mesmo* cache a cada chamada de `generate`, junto com os ids da conversa
# inteira, e o transformers pré-preenche apenas `ids[cache_length:]`: o fim da última resposta, a nova mensagem do
# usuário e o cabeçalho do assistente. Esse atalho se apoia em uma suposição que ninguém verifica: a de que os
# primeiros `cache_length` ids do novo prompt são exatamente os tokens cujas chaves e valores o cache guarda.
#
# SmolLM2-135M-Instruct com o seu template ChatML, decodificação greedy, CPU.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import os
import warnings

import ipywidgets as widgets
import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure.chat import THINK_DROPPING_TEMPLATE, ChatSession, first_mismatch, turn_prefills
from kvlab.live import live
from kvlab.measure import timing
from kvlab.plots.prefill_bars import plot_prefill_bars
from kvlab.plots.turns import alignment_counts, plot_id_alignment, plot_turn_prefills
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
user_prompts = [
    "What does a KV cache store? One sentence.",
    "Why does that make generation faster?",
    "What does it cost in exchange?",
]
SYSTEM = ("You are a patient tutor who explains how language models run on ordinary computers. Keep every "
          "answer short and concrete, avoid jargon where a plain word will do, and when you use a technical term, "
          "say in a few words what it means. The learner is a programmer who knows Python but has never looked "
          "inside a transformer. They care about memory, speed, and what can go wrong.")
NEW_TOKENS = 16  # replies stop here, mid-sentence, to keep the notebook fast
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # one timed repeat in the test suite; checked outputs hold either way

# %% [markdown]
# ## 1. Geração iterativa
#
# O loop: crie um único `DynamicCache` vazio, mantenha a conversa em uma lista `messages` e, a cada turno, renderize
# a lista inteira com o chat template, gere com o mesmo cache, decodifique apenas os tokens novos e anexe-os como
# a mensagem do assistente.

# %%
past_key_values = DynamicCache(config=model.config)
messages = [{"role": "system", "content": SYSTEM}]
for prompt in user_prompts:
    messages.append({"role": "user", "content": prompt})
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    input_length = inputs["input_ids"].shape[1]
    outputs = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, past_key_values=past_key_values)
    completion = tokenizer.decode(outputs[0, input_length:], skip_special_tokens=True)
    messages.append({"role": "assistant", "content": completion})
    print(f"prompt de {input_length} tokens, cache agora com {past_key_values.get_seq_length()}: {completion!r}")

# %% [markdown]
# **Preveja primeiro.** O prompt do turno 3 tem 170 tokens (impresso acima). Um cache novo pré-preencheria tudo isso.
# Quantos tokens o turno 3 pré-preenche com o cache reutilizado?

# %%
guess = None  # tokens turn 3 prefills with the reused cache: your guess

# %% [markdown]
# O mesmo loop dentro de `kvlab.watch`, uma vez com o cache reutilizado e outra com um `DynamicCache` novo a cada
# turno (a única mudança: o cache é criado dentro do loop). O cronômetro em volta de `generate` é o único acréscimo.
# Uma medição por turno diz pouco numa CPU compartilhada; por isso os dois loops rodam 3 vezes, alternando-se
# (reutilizado, novo, reutilizado, ...), e o tempo de cada turno é comparado como uma razão com o seu intervalo.

# %%
def run_chat(prompts, new_tokens, reuse):
    """The loop above; returns the replies and each turn's generate time in seconds."""
    past_key_values = DynamicCache(config=model.config)
    messages, replies, seconds = [{"role": "system", "content": SYSTEM}], [], []
    for prompt in prompts:
        if not reuse:
            past_key_values = DynamicCache(config=model.config)
        messages.append({"role": "user", "content": prompt})
        inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        input_length = inputs["input_ids"].shape[1]
        with timing.Stopwatch() as stopwatch:
            outputs = model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens,
                                     past_key_values=past_key_values)
        seconds.append(stopwatch.seconds)
        replies.append(outputs[0, input_length:].tolist())
        messages.append({"role": "assistant", "content": tokenizer.decode(replies[-1], skip_special_tokens=True)})
    return replies, seconds


REPEATS = 1 if QUICK else 3
reused_runs, fresh_runs = [], []
for repeat in range(REPEATS):  # interleaved, so a busy moment of the machine hits both loops alike
    with kvlab.watch(model) as reused:
        reused_replies, seconds = run_chat(user_prompts, NEW_TOKENS, reuse=True)
    reused_runs.append(seconds)
    with kvlab.watch(model) as fresh:
        fresh_replies, seconds = run_chat(user_prompts, NEW_TOKENS, reuse=False)
    fresh_runs.append(seconds)
# per turn: the repeats' times (the watches of the last repeat are kept for the counts below)
reused_turns = [timing.Timing(label=f"reutilizado, turno {n + 1}", times=list(t)) for n, t in enumerate(zip(*reused_runs))]
fresh_turns = [timing.Timing(label=f"novo, turno {n + 1}", times=list(t)) for n, t in enumerate(zip(*fresh_runs))]

# %%
# NBVAL_CHECK_OUTPUT
reused_prefill = turn_prefills(reused.trace)  # one cache: one trace, one prefill per turn
fresh_prefill = [turn_prefills(trace)[0] for trace in fresh.traces]  # one cache (and trace) per turn
print("caches vistos:", len(reused.traces), "reutilizado vs", len(fresh.traces), "novos")
print("tokens pré-preenchidos por turno, reutilizado:", reused_prefill, "| novo:", fresh_prefill)
print("mesmas respostas:", reused_replies == fresh_replies)
print("comprimento do cache reutilizado no final:", reused.caches[0].get_seq_length())

# %%
# NBVAL_CHECK_OUTPUT
print(score(guess, reused_prefill[2], unit=" tokens", kind="count"))

# %%
plot_prefill_bars({"um cache reutilizado": list(zip(reused_prefill, reused_turns)),
                   "cache novo a cada turno": list(zip(fresh_prefill, fresh_turns))},
                  "turno", f"tempo de generate (ms, mediana e IQR de {REPEATS})",
                  f"SmolLM2, {len(user_prompts)} turnos, {NEW_TOKENS} tokens novos cada")

# %%
# Timings (not checked: they depend on the machine). Per turn: medians of 3 interleaved runs (1 in the test
# suite), and the ratio reused / fresh with its 95 % interval.
for fresh_turn, reused_turn in zip(fresh_turns, reused_turns):
    print(f"{fresh_turn.describe():>36} novo | {reused_turn.describe():>36} reutilizado")
    print("   ", timing.compare(fresh_turn, reused_turn, warn=False).verdict())

# %% [markdown]
# No turno 1, os dois pré-preenchem os mesmos tokens (o cache está vazio): o mesmo trabalho; então qualquer diferença
# entre os dois tempos é ruído, e o seu intervalo deve conter 1. Do turno 2 em diante, o cache reutilizado pré-preenche
# apenas o que falta no cache: o prompt do turno 2 tem 136 tokens e o cache guardava 117 depois do turno 1
# (102 + 16 novos - 1), então 19. São o novo turno do usuário e o cabeçalho do assistente, mais duas coisas de antes:
# o último token da resposta anterior (`generate` o produziu, mas nunca o realimentou, então o cache não o guarda) e o
# marcador de fim de turno `<|im_end|>\n` com que o template fecha essa resposta. O cache novo pré-preenche a conversa
# inteira, que não para de crescer. Mesmas respostas, menos trabalho: as contagens de tokens acima são exatas. Se o
# tempo mostra isso é o veredito impresso para cada turno, com o seu intervalo; um turno cujo intervalo contém 1 não
# mostra diferença. Cada turno também executa 15 forwards de decodificação depois do seu pré-preenchimento (16 tokens
# novos), os mesmos com qualquer um dos dois caches; então as contagens preveem uma economia que é uma parte do tempo
# de cada turno, não a maior parte dele, e que cresce com o pré-preenchimento do cache novo: com a conversa e com o
# modelo (o notebook 08 trabalha com um prefixo longo).

# %% [markdown]
# ## Ao vivo: turnos e tamanho da resposta
#
# Mude o número de turnos e o de tokens novos por turno: os dois loops rodam de novo (SmolLM2, duas chamadas a
# `generate` por turno) e as barras mostram quantos tokens cada turno pré-preencheu, segundo os traces do
# `kvlab.watch`. Com respostas mais longas, cada pré-preenchimento seguinte do cache novo fica mais longo; o do
# cache reutilizado continua do tamanho do novo turno.

# %%
MORE_PROMPTS = user_prompts + ["Give one example.", "Summarise in five words."]


def prefill_per_turn(turns, new_tokens):
    with kvlab.watch(model) as reused:
        run_chat(MORE_PROMPTS[:turns], new_tokens, reuse=True)
    with kvlab.watch(model) as fresh:
        run_chat(MORE_PROMPTS[:turns], new_tokens, reuse=False)
    return plot_turn_prefills({"um cache reutilizado": turn_prefills(reused.trace),
                               "cache novo a cada turno": [turn_prefills(trace)[0] for trace in fresh.traces]},
                              title=f"SmolLM2, {turns} turnos, {new_tokens} tokens novos cada")


live(prefill_per_turn,
     turns=widgets.IntSlider(value=3, min=1, max=len(MORE_PROMPTS), continuous_update=False, description="turnos"),
     new_tokens=widgets.IntSlider(value=4, min=2, max=24, step=2, continuous_update=False, description="tokens novos"))

# %% [markdown]
# ## 2. Quando o template reescreve o histórico
#
# O guia avisa que `apply_chat_template` pode não renderizar um turno anterior do assistente do jeito que ele foi
# gerado: modelos que raciocinam dentro de `<think> ... </think>` podem perder esses tokens quando a conversa é
# recodificada, e o cache passa a guardar chaves e valores de tokens que não estão mais no prompt. O chat template
# do Qwen3 com o raciocínio desativado é escrito assim: o seu prompt de geração abre o turno do assistente com um
# bloco vazio `<think>\n\n</think>\n\n`, enquanto os turnos anteriores do assistente são renderizados a partir do
# texto que vem depois de `</think>`.
# (Esse é o template do Qwen3 tal como publicado com o seu tokenizador; este notebook não carrega o Qwen3.)
# `THINK_DROPPING_TEMPLATE` é o ChatML do SmolLM2 remodelado para se comportar
# assim, para podermos observar o efeito no nosso modelo. O loop é o de cima, com `chat_template=` acrescentado.
#
# **Preveja primeiro.** O transformers puro pré-preenche `prompt[cache_length:]` sem comparar nenhum id. A resposta
# do turno 2 com o cache reutilizado vai ser igual à resposta de um cache novo ao mesmo prompt (True ou False)?

# %%
guess_same_reply = None  # True if the reused cache gives the fresh cache's reply: your guess

# %%
past_key_values = DynamicCache(config=model.config)
messages, prompts = [], []
for prompt in user_prompts[:2]:
    messages.append({"role": "user", "content": prompt})
    inputs = tokenizer.apply_chat_template(messages, chat_template=THINK_DROPPING_TEMPLATE, add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    prompts.append(inputs["input_ids"][0].tolist())
    cached_ids = outputs[0, :past_key_values.get_seq_length()].tolist() if len(prompts) > 1 else []
    input_length = inputs["input_ids"].shape[1]
    outputs = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, past_key_values=past_key_values)
    completion = tokenizer.decode(outputs[0, input_length:], skip_special_tokens=True)
    messages.append({"role": "assistant", "content": completion})
stale_reply = completion
# The turn-2 prompt again, on a fresh cache: what the answer should have been.
reference = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS,
                           past_key_values=DynamicCache(config=model.config))
fresh_reply = tokenizer.decode(reference[0, input_length:], skip_special_tokens=True)

# %%
# NBVAL_CHECK_OUTPUT
stale = first_mismatch(cached_ids, prompts[1])  # kvlab: the ids the cache was fed vs the turn-2 prompt
print("nenhum erro levantado; os ids em cache e os do prompt se separam "
      f"na posição {stale.position} de {stale.cached_tokens} em cache")
print("o cache recebeu:    ", repr(tokenizer.decode(cached_ids[stale.position - 5:stale.position + 12])))
print("turno 2 renderizado:", repr(tokenizer.decode(prompts[1][stale.position - 5:stale.position + 12])))
print(alignment_counts(cached_ids, prompts[1]))
print("cache reutilizado (obsoleto):", repr(stale_reply))
print("cache novo:                  ", repr(fresh_reply))
print("mesma resposta:", stale_reply == fresh_reply)
print(score(guess_same_reply, stale_reply == fresh_reply, kind="choice"))

# %%
plot_id_alignment(cached_ids, prompts[1], title="Turno 2: os ids que o cache guarda vs os ids do novo prompt")

# %% [markdown]
# Toda posição em vermelho está obsoleta: o modelo faz atenção sobre chaves e valores calculados para o
# bloco think e para o texto do turno 1 em posições deslocadas, e nada avisa você. `kvlab.measure.chat.ChatSession`
# guarda os ids com que alimentou o cache e os compara antes de gerar. Por padrão, ele recusa, indicando a posição e
# os dois tokens:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
strict = ChatSession(model, tokenizer, chat_template=THINK_DROPPING_TEMPLATE, max_new_tokens=NEW_TOKENS)
strict.ask(user_prompts[0])
strict.ask(user_prompts[1])

# %% [markdown]
# **Preveja primeiro.** `on_mismatch="crop"` recorta o cache de volta até a última posição coincidente
# (`past_key_values.crop(-n)`, notebook 07) e deixa `generate` pré-preencher o resto. Quantos tokens o turno 2 vai
# pré-preencher agora, e a resposta vai coincidir com a do cache novo (True ou False)?

# %%
guess_prefilled = None  # tokens turn 2 prefills after the crop: your guess
guess_matches = None  # True if the repaired turn 2 gives the fresh cache's reply: your guess

# %%
# NBVAL_CHECK_OUTPUT
repaired = ChatSession(model, tokenizer, chat_template=THINK_DROPPING_TEMPLATE, on_mismatch="crop",
                       max_new_tokens=NEW_TOKENS)
repaired.ask(user_prompts[0])
turn = repaired.ask(user_prompts[1])
print(f"manteve {turn.reused_tokens} tokens em cache, recortou {turn.mismatch.cached_tokens - turn.mismatch.position}, "
      f"pré-preencheu {turn.prefilled_tokens} de {turn.prompt_tokens}")
print("mesma resposta que o cache novo:", turn.reply == fresh_reply)
print("recortes registrados no trace:", [c["n"] for c in repaired.cache.trace.crops])

# %%
# NBVAL_CHECK_OUTPUT
print(score(guess_prefilled, turn.prefilled_tokens, unit=" tokens", kind="count"))
print(score(guess_matches, turn.reply == fresh_reply, kind="choice"))

# %% [markdown]
# ## Principais conclusões
#
# - Reutilizar um cache ao longo dos turnos custa um único argumento: crie um `DynamicCache` uma vez e passe-o como
#   `past_key_values=` ao `generate` de cada turno, com os ids da conversa inteira. Cada turno então pré-preenche só
#   o que é novo; as respostas são as mesmas que um cache novo dá.
# - A reutilização só é correta se os ids em cache forem um prefixo dos ids do novo prompt. Um template que remove ou
#   reescreve tokens de turnos anteriores (blocos think, espaços em branco, uma resposta que é retokenizada de outro
#   jeito) quebra isso **silenciosamente** no transformers puro.
# - Compare os ids com que o cache foi alimentado com o novo prompt antes de gerar
#   (`kvlab.measure.chat.first_mismatch`), ou deixe o `ChatSession` fazer isso: levantar um erro, avisar ou recortar
#   de volta até o prefixo comum.
#
# **A seguir:** [07 · Recorte e reversão](07_crop_and_rollback.ipynb): o que `crop` faz com cada tipo de camada, e um
# loop de decodificação especulativa que retira do cache os tokens rejeitados.
