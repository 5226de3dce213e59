# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · Recorte e reversão: tirando tokens de volta de um cache
#
# **Objetivo de aprendizagem.** Depois deste notebook, você consegue reverter um cache em *n* tokens com
# `past_key_values.crop(-n)`, dizer o que um recorte faz com camadas de janela deslizante que já passaram da janela e
# com camadas de atenção linear, e o que muda quando `activate_past_recording()` é chamado antes do forward, reverter
# o estado recorrente de um modelo híbrido com `recurrent_states_to_keep`, dizer o que `crop(0)` libera e quando, e
# construir sobre isso o loop de aceitar/rejeitar da decodificação especulativa.
#
# **Nas palavras do kvlab.** Um recorte faz o cache esquecer os seus últimos *n* tokens. Uma camada de atenção
# completa simplesmente descarta as suas últimas *n* posições. Uma camada de janela deslizante guarda só os seus
# últimos `window - 1` tokens, e uma camada de atenção linear (Mamba, Gated DeltaNet) condensa cada token em um estado
# de tamanho fixo: o que um recorte consegue fazer com essas duas é o que as seções 2 e 3 pedem que você preveja.
# `activate_past_recording()` faz uma camada deslizante guardar o seu passado, e desde o transformers 5.25
# `recurrent_states_to_keep=N` faz uma camada de atenção linear guardar cópias do seu estado recorrente; a seção 3
# testa num modelo híbrido o que um recorte faz com essas cópias.
#
# SmolLM2-135M-Instruct (30 camadas de atenção completa), Gemma 3 270M (5 deslizantes : 1 completa, janela 512) e
# dois modelos minúsculos de pesos aleatórios, greedy, CPU. Cada seção primeiro executa as chamadas do próprio
# transformers e depois as mesmas chamadas dentro de `kvlab.watch`, que registra o que cada camada guarda.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
import os
import sys
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache

import kvlab
from kvlab.i18n import layer_kind_label, marks, number
from kvlab.live import live
from kvlab.measure import text, timing
from kvlab.plots._figure import subplots
from kvlab.predictions import score
from kvlab.plots.positions import plot_cached_positions, plot_holdings
from kvlab.plots.speculative import plot_speculative_steps
from kvlab.measure.linear_rollback import bytes_around_last_crop, recorded_bytes, state_match
from kvlab.measure.rollback import cached_positions, holdings, prompt_lookup_draft, speculative_generate
from kvlab.recorded_run import encode

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
transformers.logging.set_verbosity_error()  # os avisos de "slow kernel" dos modelos Mamba minúsculos
torch.manual_seed(0)
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # sem aquecimento não cronometrado na suíte de testes; as saídas verificadas valem de qualquer forma
model, tokenizer = kvlab.load("smollm2")
print(f"Python {sys.version.split()[0]} (o prompt do Gemma abaixo é o próprio texto de referência do Python)")

# %% [markdown]
# ## 1. Recortar um cache
#
# **Preveja primeiro.** Um prompt de 6 tokens, 8 tokens novos: o cache guarda 13 tokens (o 8º token novo nunca foi
# realimentado). Depois de `crop(-3)`, quantos ele guarda? Se então retomarmos a partir dos tokens mantidos, os
# mesmos três tokens voltam (True ou False)?

# %%
guess_kept = None  # tokens que o cache guarda depois de crop(-3): seu palpite
guess_same_tokens = None  # True se retomar traz de volta os mesmos três tokens: seu palpite

# %%
inputs = tokenizer("The key-value cache stores", return_tensors="pt")  # 6 ids
past_key_values = DynamicCache(config=model.config)
out = model.generate(**inputs, do_sample=False, max_new_tokens=8, past_key_values=past_key_values)
print("comprimento do cache depois de generate:", past_key_values.get_seq_length())
past_key_values.crop(-3)  # esquece os três últimos tokens
print("comprimento do cache depois de crop(-3):", past_key_values.get_seq_length())

kept_after_crop = past_key_values.get_seq_length()

# %% [markdown]
# A geração retoma a partir da posição 10: dê a `generate` os 11 ids cujos 10 primeiros o cache guarda, e ele
# alimenta apenas o 11º.

# %%
# NBVAL_CHECK_OUTPUT
again = model.generate(out[:, :11], attention_mask=torch.ones_like(out[:, :11]), do_sample=False, max_new_tokens=3,
                       past_key_values=past_key_values)
print("regerados:", again[0, 11:].tolist(), "recortados:", out[0, 11:].tolist())
print("mesmos tokens:", torch.equal(again, out), "| comprimento do cache agora:", past_key_values.get_seq_length())

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_kept, kept_after_crop, unit=" tokens", kind="count"))
display(score(guess_same_tokens, torch.equal(again, out), kind="choice"))

# %% [markdown]
# As mesmas chamadas dentro de `kvlab.watch`, que registra as posições (slots) e os bytes de armazenamento de cada
# camada. `holdings` soma esses valores por tipo de camada: `slots_live` e `bytes_per_layer` são os de uma camada,
# `bytes_all_layers` é o das 30 camadas juntas.

# %%
with kvlab.watch(model) as watch:
    past_key_values = DynamicCache(config=model.config)
    out = model.generate(**inputs, do_sample=False, max_new_tokens=8, past_key_values=past_key_values)
    stages = {"após generate": holdings(past_key_values)}
    past_key_values.crop(-3)
    stages["após crop(-3)"] = holdings(past_key_values)
    model.generate(out[:, :11], attention_mask=torch.ones_like(out[:, :11]), do_sample=False, max_new_tokens=3,
                   past_key_values=past_key_values)
    stages["após retomar"] = holdings(past_key_values)

# %%
# NBVAL_CHECK_OUTPUT
for stage, holding in stages.items():
    full = holding["full"]
    print(f"{stage:>15}: {full['layers']} camadas, {full['tokens']} tokens, {full['slots_live']} posições "
          f"ocupadas, {number(full['bytes_per_layer'])} B por camada, {number(full['bytes_all_layers'])} B no total")
crop = watch.trace.crops[-1]
print("evento de recorte:", crop["n"], "| comprimento da camada 0", crop["lengths_before"][0], "->", crop["lengths_after"][0])
slot_bytes = stages["após generate"]["full"]["bytes_per_layer"] // 13  # chaves + valores de um token, uma camada
print(f"uma posição de uma camada: {number(slot_bytes)} B; 13 posições: "
      f"{number(13 * slot_bytes)} B; 10 posições: {number(10 * slot_bytes)} B")

# %%
plot_holdings(stages, title="SmolLM2: crop(-3) remove 3 posições por camada, "
                            "o armazenamento fica até a próxima atualização")

# %% [markdown]
# As camadas passam a relatar 10 tokens na hora, mas os bytes não mudam: 19.968 B por camada equivalem a 13 posições
# (10 posições seriam 15.360 B), 599.040 B nas 30 camadas. `crop` fatia os tensores armazenados, e uma fatia é uma
# *view* que mantém viva toda a memória subjacente. A memória só é liberada quando a próxima atualização concatena as
# posições mantidas com o novo token em um tensor novo. Retomar alimenta um id e decodifica mais dois tokens: 13
# tokens de novo, e 19.968 B por camada de novo: o equivalente a 13 posições, então o armazenamento volta a
# corresponder às posições. (A seção 2 mostra que os bytes só acompanham as posições na atualização seguinte.)

# %% [markdown]
# ## 2. Gemma 3 além da janela
#
# **Preveja primeiro.** Um prompt de 520 tokens é mais longo que a janela de 512 tokens do Gemma 3. Geramos 4 tokens
# com um `DynamicCache` e depois chamamos `crop(-3)`. O recorte vai rodar (True) ou ser recusado (False)?

# %%
guess_gemma_crop_runs = None  # True se crop(-3) roda no Gemma 3 além da sua janela: seu palpite

# %%
gemma, gemma_tokenizer = kvlab.load("gemma3")
long_ids = text.prompt_ids(gemma_tokenizer, 520)  # (1, 520)
long_inputs = {"input_ids": long_ids, "attention_mask": torch.ones_like(long_ids)}
past_key_values = DynamicCache(config=gemma.config)
out = gemma.generate(**long_inputs, do_sample=False, max_new_tokens=4, past_key_values=past_key_values)
length_before = past_key_values.get_seq_length()
print("comprimento do cache:", length_before)

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
past_key_values.crop(-3)

# %%
# NBVAL_CHECK_OUTPUT
print("comprimento do cache depois de crop(-3):", past_key_values.get_seq_length())
display(score(guess_gemma_crop_runs, past_key_values.get_seq_length() == length_before - 3, kind="choice"))

# %% [markdown]
# O transformers recusa: as suas camadas deslizantes guardam só os últimos 511 tokens, então remover os 3 mais novos
# exigiria restaurar 3 antigos que elas não têm mais. A camada 0 é deslizante, então nada foi recortado (ainda 523
# tokens). Mas `DynamicCache.crop` levanta o erro de dentro do seu loop sobre as camadas (ele herda `Cache.crop` de
# `transformers/cache_utils.py`, 5.25: `for layer_idx in range(len(self.layers))`, o `crop` de cada camada por vez);
# assim, num modelo cujas primeiras camadas fossem de atenção completa, essas já estariam recortadas quando o erro
# surgisse. Sob `kvlab.watch`, o cache verifica todas as camadas primeiro e recusa antes de tocar em qualquer uma,
# indicando a correção:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
with kvlab.watch(gemma) as watch:
    past_key_values = DynamicCache(config=gemma.config)
    gemma.generate(**long_inputs, do_sample=False, max_new_tokens=4, past_key_values=past_key_values)
    past_key_values.crop(-3)

# %% [markdown]
# Agora com o registro do passado (past recording) ativado *antes* do forward. Depois de `crop(-3)`, retomamos por
# mais 4 tokens e então chamamos `crop(0)`, que não remove nenhum token.

# %%
with kvlab.watch(gemma) as watch:
    past_key_values = DynamicCache(config=gemma.config)
    past_key_values.activate_past_recording()
    out = gemma.generate(**long_inputs, do_sample=False, max_new_tokens=4, past_key_values=past_key_values)
    stages = {"com registro, 523 alimentados": holdings(past_key_values)}
    past_key_values.crop(-3)
    stages["crop(-3)"] = holdings(past_key_values)
    kept = out[:, :521]  # o cache guarda os primeiros 520
    more = gemma.generate(kept, attention_mask=torch.ones_like(kept), do_sample=False, max_new_tokens=4,
                          past_key_values=past_key_values)
    stages["mais 4 tokens"] = holdings(past_key_values)
    past_key_values.crop(0)
    stages["crop(0)"] = holdings(past_key_values)
    gemma(more[:, -1:], past_key_values=past_key_values)  # mais um forward: a próxima atualização
    stages["forward seguinte"] = holdings(past_key_values)

# %%
# NBVAL_CHECK_OUTPUT
for stage, holding in stages.items():
    sliding, full = holding["sliding"], holding["full"]
    print(f"{stage:>18}: deslizantes x{sliding['layers']}: {sliding['slots_live']} posições, "
          f"{number(sliding['bytes_all_layers'])} B | completas x{full['layers']}: "
          f"{full['slots_live']} posições, {number(full['bytes_all_layers'])} B")
print("os mesmos 3 tokens depois do recorte:", torch.equal(more[:, :524], out))
print("recortes:", [(c["n"], c["past_recording"]) for c in watch.trace.crops])
sliding = stages["com registro, 523 alimentados"]["sliding"]
print(f"uma camada deslizante, 523 recebidos: {number(sliding['bytes_per_layer'])} B = "
      f"{sliding['slots_live']} posições x {number(sliding['bytes_per_layer'] // sliding['slots_live'])} B")

# %%
plot_holdings(stages, title="Gemma 3 com registro do passado: crop(-3), mais 4 tokens, crop(0), mais um forward")

# %% [markdown]
# Com o registro do passado, as camadas deslizantes guardaram todos os 523 tokens (o preço: elas crescem como camadas
# completas até um recorte; 523 posições x 2.048 B = 1.071.104 B por camada), então `crop(-3)` consegue voltar para
# 520 tokens e reduzir as posições às 511 da janela, enquanto os bytes ficam: a fatia é uma view do armazenamento de
# 523 posições. O registro continua ativo: os 4 tokens a mais fazem as camadas deslizantes crescerem para 515
# posições, e os seus bytes para o equivalente a 515 posições (15.820.800 B em 15 camadas): armazenamento novo, os
# antigos tensores de 523 posições se foram.
# `crop(0)` então não remove nenhum token, mas reduz as camadas deslizantes de volta a 511, a parte sobre a qual o
# próximo token pode fazer atenção. De novo, os bytes de armazenamento só caem no forward seguinte, que concatena em
# um tensor novo de 512 posições: é nesse momento que `crop(0)` de fato libera o passado registrado. As posições das
# camadas completas não mudam com `crop(0)`.

# %% [markdown]
# ## 3. Camadas de atenção linear: um modelo híbrido revertido
#
# Uma camada de atenção linear (Mamba, Gated DeltaNet) guarda dois estados, não chaves e valores: uma janela curta
# de convolução sobre as suas últimas entradas e um estado recorrente que condensa cada token até aqui. Modelos
# híbridos misturam essas camadas com camadas de atenção (Qwen3-Next, Qwen3.5, Nemotron-H, Jamba, Zamba). Desde o
# transformers 5.25, `activate_past_recording(recurrent_states_to_keep=N)` faz cada camada de atenção linear guardar
# cópias do seu estado recorrente (num forward de vários tokens, as últimas N) para `crop(-n)` usar
# (`activate_past_recording` e `crop` de `LinearAttentionCacheLayerMixin`, que `LinearAttentionLayer` herda, em
# `transformers/cache_utils.py`).
#
# Nenhum modelo híbrido vem com o kvlab para uso offline (o Qwen3-Next tem 80 bilhões de parâmetros), então esta
# seção constrói um minúsculo, com **pesos aleatórios**: `kvlab.tiny_model("qwen3_next")` é o próprio código do
# Qwen3-Next com três camadas Gated DeltaNet e uma camada de atenção completa. O texto dele é ruído; o cache dele tem
# a estrutura real.
#
# **Preveja primeiro.** O modelo lê um prompt de 10 tokens e gera 4 tokens num `DynamicCache` simples. O
# `crop(-3)` vai rodar (True) ou ser recusado (False)?

# %%
guess_hybrid_crop_runs = None  # True se crop(-3) roda no cache híbrido sem registro do passado: seu palpite

# %%
hybrid = kvlab.tiny_model("qwen3_next")  # pesos aleatórios, a estrutura do Qwen3-Next
print([type(layer).__name__ for layer in DynamicCache(config=hybrid.config).layers])
hybrid_ids = torch.randint(3, 100, (1, 10), generator=torch.Generator().manual_seed(0))
with kvlab.watch(hybrid) as plain_watch:  # os bytes dele, para comparar com a execução com registro abaixo
    past_key_values = DynamicCache(config=hybrid.config)
    hybrid.generate(hybrid_ids, attention_mask=torch.ones_like(hybrid_ids), do_sample=False, max_new_tokens=4,
                    past_key_values=past_key_values, pad_token_id=0)
length_before = int(past_key_values.get_seq_length())

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
past_key_values.crop(-3)

# %%
# NBVAL_CHECK_OUTPUT
print("is_croppable:", past_key_values.is_croppable, "| tokens antes e depois de crop(-3):", length_before,
      int(past_key_values.get_seq_length()))
display(score(guess_hybrid_crop_runs, int(past_key_values.get_seq_length()) == length_before - 3, kind="choice"))

# %% [markdown]
# Ele falha na hora, embora `is_croppable` diga True: essa flag diz se as classes de camada do cache podem ser
# recortadas, não se este cache registrou o que um recorte precisa. Sem registro do passado, uma camada de atenção
# linear guarda só o seu estado mais novo.
#
# **Preveja primeiro.** A mesma geração, com `activate_past_recording(recurrent_states_to_keep=10)` antes. Depois
# de `crop(-3)`, o estado recorrente de cada camada de atenção linear é, bit a bit, o de uma execução parada 3 tokens
# antes (True ou False)?

# %%
guess_state_restored = None  # True se cada estado recorrente restaurado é exatamente igual ao da execução parada: seu palpite

# %%
KEEP = 10  # recurrent_states_to_keep: um estado por token do prompt de 10 tokens; cada token decodificado acrescenta mais um
with kvlab.watch(hybrid) as watch:
    past_key_values = DynamicCache(config=hybrid.config)
    past_key_values.activate_past_recording(recurrent_states_to_keep=KEEP)
    hybrid.generate(hybrid_ids, attention_mask=torch.ones_like(hybrid_ids), do_sample=False, max_new_tokens=4,
                    past_key_values=past_key_values, pad_token_id=0)
    recorded = recorded_bytes(past_key_values)  # as cópias de estados recorrentes que as camadas guardam
    past_key_values.crop(-3)
stopped = DynamicCache(config=hybrid.config)  # a mesma execução parada 3 tokens antes: só o forward do prompt
stopped.activate_past_recording(recurrent_states_to_keep=KEEP)
hybrid.generate(hybrid_ids, attention_mask=torch.ones_like(hybrid_ids), do_sample=False, max_new_tokens=1,
                past_key_values=stopped, pad_token_id=0)
linear = [i for i, layer in enumerate(past_key_values.layers) if hasattr(layer, "recurrent_states")]
matches = [state_match(past_key_values.layers[i].recurrent_states[0], stopped.layers[i].recurrent_states[0])
           for i in linear]

# %%
# NBVAL_CHECK_OUTPUT
crop = watch.trace.crops[-1]
print(f"crop(-3): comprimentos das camadas {crop['lengths_before']} -> {crop['lengths_after']}, "
      f"estados recorrentes restaurados: {crop['recurrent_states_restored']}")
print(f"camadas {linear} iguais às da execução parada, bit a bit:", [m.equal for m in matches],
      "| maior diferença:", marks(str(max(m.max_abs_difference for m in matches))))
display(score(guess_state_restored, all(m.equal for m in matches), kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
one_state = past_key_values.layers[0].recurrent_states[0]  # (batch, cabeças de valor, dim. da chave, dim. do valor)
state_bytes = one_state.numel() * one_state.element_size()
held_before, held_after = bytes_around_last_crop(watch.trace)
print(f"um estado recorrente: {tuple(one_state.shape)} {str(one_state.dtype).split('.')[-1]} = {number(state_bytes)} B")
print(f"registrado antes do recorte: {number(recorded)} B = {recorded // state_bytes} "
      f"cópias ({len(linear)} camadas x {recorded // state_bytes // len(linear)} tokens)")
print(f"bytes guardados segundo o trace: {number(held_before)} B antes do recorte, {number(held_after)} "
      f"B depois dele; a mesma execução sem registro: {number(plain_watch.trace.bytes_by_step()[-1])} B")

# %% [markdown]
# Bit a bit: em cada uma das 3 camadas de atenção linear, o recorte devolveu a cópia feita antes do 11º token, que é
# o estado com que termina uma execução parada depois do prompt (a maior diferença é 0,0). As cópias são o preço:
# 4.096 B por camada e por token aqui, 159.744 B para 13 tokens em 3 camadas, e o trace as conta como guardadas
# (195.328 B antes do recorte, contra 21.760 B da mesma execução sem registro; o resto da diferença são as entradas de
# convolução que uma camada com registro também guarda: enquanto registra, `update_conv_state` guarda as entradas
# inteiras em vez das últimas `conv_kernel_size`, `LinearAttentionLayer` em `transformers/cache_utils.py`). O recorte
# esvazia as cópias; o trace ainda mostra 35.584 B depois dele porque as entradas de convolução recortadas são views
# do seu armazenamento mais longo até o próximo forward, como as chaves e os valores na seção 1.
#
# `recurrent_states_to_keep` conta num forward de vários tokens. Com N = 2, menos que o prompt de 10 tokens, o
# forward do prompt guarda o estado de antes dele e o de antes do seu último token, então a cópia mais antiga não é
# o estado que ela representa: o transformers a devolveria sem dizer nada (`update_recurrent_state` registra o estado
# de antes do forward e todos os N estados que o modelo passa, menos o último, e `crop(-n)` pega a n-ésima entrada do
# histórico a contar do fim, sem verificar nada: `LinearAttentionLayer` e o `LinearAttentionCacheLayerMixin`, do qual
# ela herda `crop`, em `transformers/cache_utils.py`). O kvlab recusa um recorte que chegue até ela e diz quais
# contagens são válidas:

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(hybrid):
    short = DynamicCache(config=hybrid.config)
    short.activate_past_recording(recurrent_states_to_keep=2)  # N = 2, menos que o prompt
    hybrid.generate(hybrid_ids, attention_mask=torch.ones_like(hybrid_ids), do_sample=False, max_new_tokens=4,
                    past_key_values=short, pad_token_id=0)
    try:
        short.crop(-5)
    except kvlab.CacheCropError as err:
        print(err)

# %% [markdown]
# Até 4 tokens para trás é exato aqui: os 3 tokens decodificados e o último do prompt. Antes do transformers 5.25
# (o kvlab suporta de 5.21 a 5.25), uma camada de atenção linear não guarda cópia nenhuma: o recorte dela aparava
# as entradas de convolução e deixava o estado recorrente onde estava, então ali o kvlab recusa toda contagem
# exceto `crop(0)`.

# %% [markdown]
# ## 4. Ao vivo: o que cada camada guarda depois de `crop(-n)`
#
# O Gemma 3 minúsculo do kvlab tem janela de 8 e 6 camadas (deslizante, deslizante, completa, duas vezes). Ele lê 14
# tokens de prompt, gera 6 e então aplica `crop(-n)`. Mude *n* e marque *registro do passado*: desmarcado, `crop(-n)` é
# recusado para qualquer n a partir de 1 (o modelo recebeu 19 tokens, mais que a janela); marcado, as camadas
# deslizantes guardam o passado inteiro até que o recorte as reduza. As colunas vermelhas são as posições que o recorte
# removeu; as laranja, o que uma camada deslizante já tinha descartado.

# %%
tiny = kvlab.tiny_model("tiny-gemma3")
tiny_ids = torch.randint(3, 128, (1, 14), generator=torch.Generator().manual_seed(0))


def crop_picture(n, past_recording):
    """Generate on tiny Gemma 3 with a DynamicCache, crop(-n), draw the positions each layer holds."""
    with kvlab.watch(tiny) as watch:
        past_key_values = DynamicCache(config=tiny.config)
        if past_recording:
            past_key_values.activate_past_recording()
        tiny.generate(tiny_ids, attention_mask=torch.ones_like(tiny_ids), do_sample=False, max_new_tokens=6,
                      past_key_values=past_key_values, pad_token_id=0)
        try:
            past_key_values.crop(-n)
            refusal = None
        except kvlab.CacheCropError as err:
            refusal = str(err).split(", ")[0]  # sua primeira oração: "crop(-n) refused: sliding layer 0 ..."
        rows = cached_positions(past_key_values)
    fig, ax = subplots(figsize=(9, 3.2))
    length = past_key_values.get_seq_length()
    if refusal is not None:  # só sem registro do passado
        plot_cached_positions(rows, title=f"sem registro do passado, {refusal}", ax=ax, cropped=0)
    elif past_recording:
        plot_cached_positions(rows, title=f"com registro do passado, depois de crop(-{n}): {length} tokens", ax=ax, cropped=n)
    else:
        plot_cached_positions(rows, title=f"sem registro do passado, depois de crop(-{n}): {length} tokens", ax=ax,
                              cropped=n)
    return fig


live(crop_picture,
     n=widgets.IntSlider(value=3, min=0, max=8, continuous_update=False, description="n em crop(-n)"),
     past_recording=widgets.Checkbox(value=True, description="registro do passado"))

# %%
# NBVAL_CHECK_OUTPUT
for recording in (False, True):
    with kvlab.watch(tiny) as watch:
        past_key_values = DynamicCache(config=tiny.config)
        if recording:
            past_key_values.activate_past_recording()
        tiny.generate(tiny_ids, attention_mask=torch.ones_like(tiny_ids), do_sample=False, max_new_tokens=6,
                      past_key_values=past_key_values, pad_token_id=0)
        rows = cached_positions(past_key_values)
    print(f"registro do passado {recording!s:>5}:", {f"{r['layer_idx']} {layer_kind_label(r['layer_kind'])}": (
        r["positions_live"][0], r["positions_live"][-1], len(r["positions_visible"])) for r in rows[:3]})

# %% [markdown]
# Antes de qualquer recorte, uma camada de atenção completa guarda as posições 0–18 e uma camada deslizante só as
# 12–18, as 7 sobre as quais o próximo token (posição 19) faz atenção, junto com ele mesmo. Com o registro do
# passado, as camadas deslizantes também guardam tudo, mas o próximo token continua vendo só as últimas 7: o resto
# está ali apenas para que um recorte possa voltar atrás.

# %% [markdown]
# ## 5. Decodificação especulativa: aceitar, rejeitar, reverter
#
# A decodificação especulativa propõe vários tokens a baixo custo, verifica todos eles com **um** forward do modelo e
# mantém o prefixo mais longo que coincide com o que a decodificação greedy teria escolhido, mais o próprio token do
# modelo no primeiro desacordo. O forward escreveu chaves e valores para cada token de rascunho, então os rejeitados são
# recortados com `crop(-rejected)`. Aqui os rascunhos vêm de *prompt lookup* (busca no prompt): encontrar uma
# ocorrência anterior do último token no texto e propor os 5 tokens que vieram depois dela, o que não custa nada e
# funciona quando a saída copia a entrada. (`kvlab.measure.rollback.speculative_generate` é o loop, em algumas dezenas de
# linhas.)
#
# **Preveja primeiro.** Pede-se ao modelo que copie uma lista de 10 itens. O loop vai produzir exatamente a saída
# greedy? De quantos forwards ele vai precisar (até 48 tokens; a resposta pode terminar antes), e quantos tokens de rascunho
# vai reverter?

# %%
guess_same_as_greedy = None  # True se os tokens do loop são iguais aos da decodificação greedy simples: seu palpite
guess_forwards = None  # forwards do modelo, incluindo o pré-preenchimento: seu palpite
guess_rolled_back = None  # tokens de rascunho revertidos pelo recorte: seu palpite

# %%
copy_prompt = encode(tokenizer, "Copy this list exactly, twice: red, orange, yellow, green, blue, indigo, "
                                "violet, white, black, grey.", chat=True)
greedy = model.generate(copy_prompt, attention_mask=torch.ones_like(copy_prompt), do_sample=False,
                        max_new_tokens=48)[0, copy_prompt.shape[-1]:].tolist()
spec = speculative_generate(model, copy_prompt, 48, prompt_lookup_draft(ngram=1), k=5,
                            eos_token_id=tokenizer.eos_token_id)

# %%
# NBVAL_CHECK_OUTPUT
print("mesmos tokens que o greedy:", spec.token_ids == greedy)
drafted = sum(1 for step in spec.steps if step.drafted)
print(f"forwards: 1 pré-preenchimento + {len(spec.steps)} depois dele ({drafted} verificaram um rascunho, "
      f"{len(spec.steps) - drafted} não tinham rascunho e decodificaram um token) = {spec.forwards}")
print(f"tokens de rascunho: {spec.accepted + spec.rejected} = {spec.accepted} aceitos + "
      f"{spec.rejected} revertidos; recortes: {[c['n'] for c in spec.cache.trace.crops]}")
produced = 1 + spec.accepted + len(spec.steps)  # o token do pré-preenchimento, os rascunhos aceitos, o token do próprio modelo por forward
print(f"tokens produzidos: 1 pelo pré-preenchimento + {spec.accepted} rascunhos aceitos + "
      f"{len(spec.steps)} do próprio modelo (um por forward depois do pré-preenchimento) = {produced}")
print(f"mantidos: {len(spec.token_ids)}, até <|im_end|> inclusive; "
      f"{produced - len(spec.token_ids)} produzidos depois dele são descartados")
print("o último token mantido é <|im_end|>:", spec.token_ids[-1] == tokenizer.eos_token_id)
print(f"decodificação greedy simples dos mesmos {len(greedy)} tokens: {len(greedy)} forwards, um por token")
print(repr(tokenizer.decode(spec.token_ids)))

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_same_as_greedy, spec.token_ids == greedy, kind="choice"))
display(score(guess_forwards, spec.forwards, unit=" forwards", kind="count"))
display(score(guess_rolled_back, spec.rejected, unit=" tokens", kind="count"))

# %%
plot_speculative_steps(spec)

# %% [markdown]
# Cada token de rascunho rejeitado foi escrito no cache pelo forward de verificação e removido por `crop(-rejected)`
# logo em seguida, então o forward seguinte parte exatamente dos tokens que foram mantidos. A saída é, token por
# token, a da decodificação greedy, em menos forwards que o um por token da greedy (as duas contagens estão impressas
# acima). As contagens fecham como impressas: cada forward depois do pré-preenchimento confirma os seus rascunhos
# aceitos mais um token do próprio modelo, e o último forward de verificação seguiu além de `<|im_end|>`: os tokens
# que ele confirmou depois de `<|im_end|>` (contados acima) são produzidos, mas não mantidos, já que a resposta
# termina ali. A figura desenha cada forward depois do pré-preenchimento: os que têm um rascunho (draft) como barras,
# os que não têm marcados com "sem rascunho". No Gemma 3, o mesmo loop precisa de `activate_past_recording()` assim
# que a sequência passa da janela (`speculative_generate(..., past_recording=True)`), pelo motivo visto na seção 2.

# %% [markdown]
# ### Menos forwards: é mais rápido?
#
# As contagens acima são exatas em qualquer máquina. Quanto elas custam aqui é uma medição: o mesmo loop rodado duas
# vezes sobre o mesmo prompt, uma com prompt lookup e outra com um rascunho que nunca propõe nada, o que é a
# decodificação greedy simples (um forward por token, nenhum recorte), de modo que a única diferença é o rascunho. As
# execuções são repetidas e intercaladas (greedy, especulativa, greedy, ...); cada uma é impressa como uma mediana com o
# seu intervalo interquartil (IQR), e o veredito compara as medianas, com um intervalo
# bootstrap da razão entre elas.
#
# O que as contagens preveem: um forward de verificação alimenta até 6 tokens em vez de 1, e, num modelo pequeno,
# boa parte do tempo de um forward não depende de quantos tokens ele alimenta (ler os pesos, disparar do Python as
# operações de 30 camadas), então 9 forwards deveriam ganhar de 25. Em sentido contrário, cada forward de verificação
# faz a aritmética de cada token de rascunho, os rejeitados inclusive, e numa CPU de 2 núcleos essa aritmética não sai
# de graça: quanto maior a fração do tempo de um forward que ela consome, menos valem os forwards economizados.

# %%
def no_draft(ids, k):  # não sugere nada: cada forward decodifica um token, decodificação greedy simples
    return []


plain = speculative_generate(model, copy_prompt, 48, no_draft, k=5, eos_token_id=tokenizer.eos_token_id)
runs = {
    "decodificação greedy": lambda: speculative_generate(model, copy_prompt, 48, no_draft, k=5,
                                           eos_token_id=tokenizer.eos_token_id),
    "decodificação especulativa": lambda: speculative_generate(model, copy_prompt, 48, prompt_lookup_draft(ngram=1), k=5,
                                                eos_token_id=tokenizer.eos_token_id),
}
times = timing.time_interleaved(runs, repeats=3 if QUICK else 7, warmup=0 if QUICK else 1)  # 3 no mínimo

# %%
# NBVAL_CHECK_OUTPUT
print("sem rascunho dá os tokens do greedy:", plain.token_ids == greedy, "| forwards:", plain.forwards, "contra", spec.forwards)
fed_plain = sum(1 + len(step.drafted) for step in plain.steps)
fed_spec = sum(1 + len(step.drafted) for step in spec.steps)
print(f"tokens alimentados depois do pré-preenchimento: greedy {fed_plain} em "
      f"{len(plain.steps)} forwards, especulativa {fed_spec} em {len(spec.steps)} forwards")

# %%
# Tempos (não verificados: dependem da máquina). Medianas de execuções intercaladas e especulativa / greedy.
for label, measured in times.items():
    print(f"{label:>26}: {measured.describe()}")
print(timing.compare(times["decodificação greedy"], times["decodificação especulativa"], warn=False).verdict())

# %% [markdown]
# Leia o veredito como foi impresso. "mais rápido" quer dizer que os forwards economizados pesaram mais do que os
# tokens extras que cada forward de verificação alimentou; "nenhuma diferença além do ruído" (um intervalo que contém
# 1) ou "ruído demais para concluir" quer dizer que esta máquina não conseguiu distinguir os dois nessas repetições;
# "mais devagar" quereria dizer que a aritmética extra dos forwards de verificação custou mais do que os 16 forwards
# economizados. Onde um forward de 6 tokens custa mais ou menos o mesmo que um de 1, a premissa da decodificação
# especulativa (fonte: Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"), a economia
# é maior; com um modelo de rascunho separado, os forwards dele se somariam ao lado especulativo.

# %% [markdown]
# ## Principais conclusões
#
# - `past_key_values.crop(-n)` esquece os últimos *n* tokens. Camadas de atenção completa sempre conseguem. Camadas
#   deslizantes além da janela só conseguem se `activate_past_recording()` tiver sido chamado antes do forward, ao
#   preço de guardar o passado até o próximo recorte; camadas de atenção linear recusam qualquer recorte sem isso.
# - Uma camada de atenção linear reverte o que registrou: desde o transformers 5.25,
#   `activate_past_recording(recurrent_states_to_keep=N)` guarda uma cópia do seu estado recorrente por token (as
#   últimas N de um forward de vários tokens), e `crop(-n)` devolve a de n tokens antes, bit a bit. As cópias são
#   bytes guardados até o recorte.
# - Um recorte não libera memória por si só: ele deixa views do armazenamento antigo, liberado na próxima
#   atualização. `crop(0)` reduz as camadas deslizantes que registram o passado de volta à janela; os bytes vão embora no
#   forward seguinte.
# - A decodificação especulativa é recorte em loop: verifique *k* tokens de rascunho em um forward, mantenha o que
#   coincide, recorte o resto. A saída é igual à da decodificação greedy, em menos forwards; o veredito impresso no fim
#   da seção 5 diz se esses forwards a menos pouparam tempo nesta máquina (um forward de verificação alimenta vários
#   tokens).
#
# **A seguir:** [08 · Cache de prefixo](08_prefix_caching.ipynb): pré-preencha uma vez um prefixo compartilhado e
# copie o cache para cada pergunta.
